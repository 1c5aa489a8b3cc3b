"""verispec: the command-line layer and model registry over reference/ and engine/."""

__version__ = "0.1.0"
