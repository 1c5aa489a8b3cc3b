"""llama-cpp-python's prompt lookup decoding and a history-dependent logits processor.

The processor is handed ``Llama._input_ids``, which under prompt lookup already holds drafted
tokens not yet verified (examples/llama_cpp_processor_history_repro.py, docs/peers.md). Skips
without llama-cpp-python (the optional ``llama`` extra, which compiles llama.cpp).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.peer_verdicts import write_models

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


def test_prompt_lookup_passes_a_small_depth_run_with_penalties(tmp_path: Path) -> None:
    """The adapter under ``--law llama.cpp`` and the engine's own logits: repeat, frequency and
    presence penalties over the output tokens (8 tokens, power 0.99 against TV 0.5 on every position)."""
    from verispec.decoder.api import check_decoder
    from verispec.peers.llama_cpp_peer import prompt_lookup

    target = write_models(tmp_path)["target"]
    report = check_decoder(
        prompt_lookup,
        model=target,
        law="llama.cpp",
        target_law="engine-logits",
        depth=8,
        tv=0.5,
        fraction=1.0,
        temperature=0.8,
        repeat_penalty=1.3,
        frequency_penalty=0.2,
        presence_penalty=0.1,
    )
    assert report.passed, report.results[0].detail


def test_generation_seeds_differ_across_calls_and_the_penalized_prompt_is_refused() -> None:
    from verispec.peers.llama_cpp_peer import generation_seed, sampling_kwargs
    from verispec.reference.errors import CheckError
    from verispec.reference.sampling import SamplingParams
    from verispec.spec.decoder.laws import build

    seeds = {generation_seed(s, i) for s in range(20) for i in range(20)}
    assert len(seeds) == 400  # seed + i would collide across consecutive calls
    kwargs, window = sampling_kwargs(
        SamplingParams(), build("llama.cpp", {"repeat_penalty": 1.2, "penalty_last_n": 32})
    )
    assert kwargs["repeat_penalty"] == 1.2 and kwargs["min_p"] == 0.05 and window == 32
    with pytest.raises(CheckError, match="penalizes the prompt"):
        from dataclasses import replace

        law = build("llama.cpp", {})
        sampling_kwargs(SamplingParams(), replace(law, params=replace(law.params, penalize_prompt=True)))


def test_the_scorer_continues_a_plain_feed_exactly_as_a_fresh_one(tmp_path: Path) -> None:
    """The depth test's plain-fed rows (the prompt in one pass, then one token at a time) ask for
    every prefix of a generation in turn; the adapter continues its scorer instead of re-feeding,
    which must give bitwise the rows a fresh scorer computes with the same batches (n_threads 1:
    deterministic), and a one-pass row afterwards must not reuse a split state."""
    from verispec.peers.llama_cpp_peer import LlamaCppPeer

    target = write_models(tmp_path)["target"]
    continued, fresh = LlamaCppPeer(target, lookup_tokens=None), LlamaCppPeer(target, lookup_tokens=None)
    prompt, tokens = [1, 5, 9, 13], [7, 3, 11, 2, 8]
    for i in range(1, len(tokens) + 1):
        row = continued.logits(prompt + tokens[:i], split_at=len(prompt))
        fresh.fed = ([], -1)  # forget: a reset and a full feed
        assert row == fresh.logits(prompt + tokens[:i], split_at=len(prompt))
    one_pass = continued.logits(prompt + tokens)
    fresh.fed = ([], -1)
    assert one_pass == fresh.logits(prompt + tokens)


def test_the_example_adapter_scores_with_the_shipped_adapters_logits(tmp_path: Path) -> None:
    """examples/llama_cpp_decoder.py's ``logits`` is the shipped adapter's (plain_logits): the same
    rows, bit for bit, in one batch and split, for a prefix of the tiny target."""
    from examples.llama_cpp_decoder import LlamaCppLookupDecoder
    from verispec.peers.llama_cpp_peer import LlamaCppPeer

    target = write_models(tmp_path)["target"]
    example, shipped = LlamaCppLookupDecoder(target), LlamaCppPeer(target)
    prefix = [1, 259, 87, 286, 300, 296, 294, 296, 259]
    for split_at in (None, 4):
        assert example.logits(prefix, split_at) == shipped.logits(prefix, split_at)


def test_the_fix_applied_to_the_installed_library_hands_the_processor_no_draft(tmp_path: Path) -> None:
    """examples/repros/llama_cpp_processor_history.py's fix on the real ``Llama`` (the gate's
    ``--patched``): under prompt lookup no processor call sees a draft and no banned repeat is
    emitted; undone, the released behaviour is back (the same seeds)."""
    import importlib.util

    from examples.llama_cpp_processor_history_repro import run

    repro = Path(__file__).resolve().parents[1] / "examples" / "repros" / "llama_cpp_processor_history.py"
    spec = importlib.util.spec_from_file_location("llama_cpp_processor_history_fix", repro)
    assert spec is not None and spec.loader is not None
    fix = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fix)
    target = str(write_models(tmp_path)["target"])
    with fix.patched_llama():
        tokens, calls, ahead, repeats = run(target, lookup=True, generations=6)
    assert calls == tokens and ahead == 0 and repeats == 0
    assert run(target, lookup=True, generations=6)[2] > 0
