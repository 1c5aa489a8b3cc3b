"""One module per `verispec` subcommand; each exposes ``register(subparsers)``."""
