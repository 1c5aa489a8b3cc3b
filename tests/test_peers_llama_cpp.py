"""llama-cpp-python's prompt lookup decoding and a history-dependent logits processor.

The processor is handed ``Llama._input_ids``, which under prompt lookup already holds drafted
tokens not yet verified (examples/llama_cpp_processor_history_repro.py, docs/peers.md). Skips
without llama-cpp-python (the optional ``llama`` extra, which compiles llama.cpp).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.peer_verdicts import write_models

llama_cpp = pytest.importorskip("llama_cpp")

pytestmark = pytest.mark.usefixtures("blas_single_thread")


def test_prompt_lookup_hands_the_processor_unverified_drafts(tmp_path: Path) -> None:
    """Plain decoding hands the processor exactly prompt + the tokens emitted so far; prompt lookup
    hands it longer histories (its drafts), deterministic for the seeds used."""
    from examples.llama_cpp_processor_history_repro import run

    target = str(write_models(tmp_path)["target"])
    tokens, calls, ahead, repeats = run(target, lookup=False, generations=6)
    assert calls == tokens and ahead == 0 and repeats == 0
    tokens, calls, ahead, repeats = run(target, lookup=True, generations=6)
    assert ahead > 0, f"no processor call saw a draft in {calls} calls"
