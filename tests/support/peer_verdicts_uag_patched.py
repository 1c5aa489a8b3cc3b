"""The gate's verdict on transformers' universal assisted generation with the scatter-order fix.

    python -m tests.support.peer_verdicts_uag_patched --out DIR --path universal --params t1 --fraction 1.0 [--depth 16 --tv 0.1]

The same command line as ``python -m tests.support.peer_verdicts`` (one engine process: the fix is a
monkeypatch of this process's transformers, so ``--workers`` must stay 1), with
``AssistantToTargetTranslator.get_target_logits`` replaced by the one-line fix of
examples/repros/transformers_uag_scatter_order.py for the whole run. Run it beside the unpatched
command on the same design and seeds: the broken library fails, the patched one is judged as is.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from tests.support import peer_verdicts

REPRO = Path(__file__).resolve().parents[2] / "examples" / "repros" / "transformers_uag_scatter_order.py"


def load_fix() -> ModuleType:
    spec = importlib.util.spec_from_file_location("transformers_uag_scatter_order", REPRO)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if "--workers" in arguments and arguments[arguments.index("--workers") + 1] != "1":
        raise SystemExit("--workers must be 1: the fix patches this process's transformers only")
    with load_fix().patched_translator():
        return peer_verdicts.main(arguments)


if __name__ == "__main__":
    sys.exit(main())
