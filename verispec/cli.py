"""`verispec` command line: a thin layer that parses, calls the library, prints text or --json.

Each subcommand lives in its own module under :mod:`verispec.commands` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a ``run(args) -> int``.
Typed verispec errors (and files that cannot be read) become one line on stderr and the exit
status :mod:`verispec.exit_codes` gives them: 2 for usage errors, 4 for model / input errors, 1
for an implementation that broke the protocol; Ctrl-C becomes one line and exit status 130 and
SIGTERM exit status 143 (every output file or folder is written atomically, so nothing is
half-written), and on both every program under test still running is killed with its children
(:func:`spec.external.kill_all_peers`) before the exit; nothing else is swallowed.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
from collections.abc import Sequence

from verispec.exit_codes import EXIT_INTERRUPTED, exit_code_for
from verispec.reference.errors import Terminated, VerispecError

# One entry per subcommand module in verispec/commands/ (add yours here).
COMMAND_MODULES: tuple[str, ...] = (
    "models",
    "inspect",
    "tokenize",
    "vectors",
    "check",
    "check_decoder",
    "witness",
    "generate",
    "logits",
    "calibrate",
    "bench",
    "demo",
    "template",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="verispec",
        description="Certified fast decoding of quantized GGUF models, and the spec that checks it.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"verispec.commands.{name}")
        module.register(subparsers)
    return parser


EXIT_TERMINATED = 143  # 128 + SIGTERM


def _kill_peers() -> None:
    """Kill the programs under test, if this run started any (spec.external is loaded only then)."""
    external = sys.modules.get("verispec.spec.external")
    if external is not None:
        external.kill_all_peers()


def _on_sigterm(signum: int, frame: object) -> None:
    _kill_peers()  # first: a peer must not outlive the checker even if unwinding hangs
    raise Terminated


def main(argv: Sequence[str] | None = None) -> int:
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if _main_thread() else None
    try:
        return _main(argv)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _main(argv: Sequence[str] | None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        status: int = args.func(args)
    except (VerispecError, OSError) as exc:
        if isinstance(exc, BrokenPipeError):  # `verispec ... | head`
            return 0
        print(f"verispec: error: {exc}", file=sys.stderr)
        return exit_code_for(exc)
    except KeyboardInterrupt:  # Ctrl-C: outputs are atomic (verispec/atomic.py), so nothing is half-written
        _kill_peers()
        print("verispec: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        _kill_peers()
        print("verispec: terminated", file=sys.stderr)
        return EXIT_TERMINATED
    return status


if __name__ == "__main__":
    sys.exit(main())
