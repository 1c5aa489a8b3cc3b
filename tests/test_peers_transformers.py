"""transformers' speculative paths through the check-decoder gate, on tiny synthetic GGUF models.

transformers loads each tiny file itself (verispec/peers/transformers_peer.py), so one generate()
costs milliseconds. Each path gets a small-N smoke run of the depth test (8 tokens, power 0.99
against TV 0.5 on every position: a few hundred tokens) at a setting where transformers' law is
verispec's default law, and the gate is shown to reject through the adapter: an adapter that
samples at twice the temperature it is asked for fails. The full-power verdicts (TV 0.05) are
``python -m tests.support.peer_verdicts`` (minutes each; docs/peers.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.support.hf_oracle import memoized_gguf
from tests.support.peer_verdicts import PROMPT, write_models
from verispec.decoder.api import check_decoder
from verispec.reference.errors import CheckError
from verispec.reference.sampling import SamplingParams

pytestmark = [pytest.mark.oracle, pytest.mark.usefixtures("blas_single_thread")]

SMOKE = {"depth": 8, "tv": 0.5, "fraction": 1.0, "prompts": (PROMPT,)}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import torch

    from verispec.peers.transformers_peer import load_causal_lm

    torch.set_num_threads(1)
    models = write_models(tmp_path_factory.mktemp("peers"))
    with memoized_gguf():  # the adapter's per-process cache, filled at the oracle's loading cost
        for key in ("target", "assistant", "other-tokenizer"):
            load_causal_lm(models[key])
    return models


def _factory(files: dict[str, Path], path: str, **options: Any) -> Any:
    from verispec.peers.transformers_peer import engine

    assistant = {"assisted": files["assistant"], "universal": files["other-tokenizer"]}.get(path)
    return lambda model_path: engine(model_path, path, assistant=assistant, **options)


@pytest.mark.parametrize("path", ["plain", "prompt-lookup", "assisted", "early-exit"])
def test_each_path_passes_a_small_depth_run_where_the_laws_coincide(files: dict[str, Path], path: str) -> None:
    report = check_decoder(
        _factory(files, path), model=files["target"], temperature=0.7, top_k=0, repeat_penalty=1.0, **SMOKE
    )
    outcome = report.results[0]
    assert outcome.passed and outcome.numbers["state"] == "passed", outcome.detail
    assert outcome.numbers["tokens"] >= outcome.numbers["design_tokens"] > 0


def test_universal_assisted_generation_fails_the_gate(files: dict[str, Path]) -> None:
    """transformers 5.24's sampled universal assisted generation (an assistant with another
    tokenizer) emits tokens the target almost never draws (docs/peers.md,
    examples/transformers_universal_repro.py): the depth test itself rejects it within one
    generation (first-m off: the default run's first-m test would reject it first, by chi-square,
    and the depth test's impossible-token look is what this test holds). Should a release fix it,
    this test fails and the verdict table is to be rerun."""
    report = check_decoder(
        _factory(files, "universal"),
        model=files["target"],
        temperature=0.7,
        top_k=0,
        repeat_penalty=1.0,
        first_m=False,
        **SMOKE,
    )
    outcome = report.results[0]
    assert outcome.numbers["state"] == "failed" and "too unlikely tokens" in outcome.detail, outcome.detail


def test_the_assistant_built_from_the_target_passes_too(files: dict[str, Path]) -> None:
    from verispec.peers.transformers_peer import engine

    report = check_decoder(
        lambda p: engine(p, "assisted"), model=files["target"], temperature=1.0, top_k=8, repeat_penalty=1.0, **SMOKE
    )
    assert report.passed, report.results[0].detail


def test_library_defaults_are_top_k_50_at_temperature_1(files: dict[str, Path]) -> None:
    """``do_sample=True`` alone samples transformers' defaults: the gate run at top_k 50 passes,
    and the library still states those defaults (the adapter's LIBRARY_DEFAULTS)."""
    from transformers import GenerationConfig

    from verispec.peers.transformers_peer import LIBRARY_DEFAULTS

    defaults = GenerationConfig._get_default_generation_params()
    assert (defaults["top_k"], defaults["temperature"], defaults["top_p"]) == (LIBRARY_DEFAULTS.top_k, 1.0, 1.0)
    report = check_decoder(
        _factory(files, "prompt-lookup", library_defaults=True),
        model=files["target"],
        temperature=1.0,
        top_k=50,
        repeat_penalty=1.0,
        **SMOKE,
    )
    assert report.passed, report.results[0].detail


class _TwiceTheTemperature:
    """An adapter that asks transformers for twice the temperature the gate gave: a wrong law."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[list[int]]:
        wrong = replace(params, temperature=2.0 * params.temperature)
        result: list[list[int]] = self.engine.generate(prompt_ids, wrong, max_tokens, n, seed, min_tokens)
        return result


@pytest.mark.parametrize("path", ["prompt-lookup", "assisted"])
def test_the_gate_rejects_a_wrong_law_through_the_adapter(files: dict[str, Path], path: str) -> None:
    inner = _factory(files, path)
    report = check_decoder(
        lambda p: _TwiceTheTemperature(inner(p)),
        model=files["target"],
        temperature=0.5,
        top_k=0,
        repeat_penalty=1.0,
        **SMOKE,
    )
    outcome = report.results[0]
    assert not outcome.passed and outcome.numbers["state"] == "failed", outcome.detail


@pytest.mark.parametrize("path", ["prompt-lookup", "assisted", "early-exit"])
def test_greedy_mode_passes_each_same_tokenizer_path(files: dict[str, Path], path: str) -> None:
    report = check_decoder(_factory(files, path), model=files["target"], greedy=True, max_tokens=16, prompts=(PROMPT,))
    assert report.passed, report.results[0].detail


def test_the_transformers_law_profile_drives_the_whole_parameter_set(files: dict[str, Path]) -> None:
    """Under ``--law transformers`` the engine receives the profile and samples its params as they
    are: tempered top-p (where verispec's law would differ) and min_new_tokens."""
    report = check_decoder(
        _factory(files, "prompt-lookup"),
        model=files["target"],
        law="transformers",
        temperature=0.7,
        top_k=0,
        top_p=0.8,
        min_tokens=4,
        **SMOKE,
    )
    assert report.passed, report.results[0].detail


def test_profile_keywords_refuse_another_ecosystems_law() -> None:
    from verispec.peers.transformers_peer import profile_kwargs
    from verispec.spec.decoder.laws import build

    hf = build("transformers", {"temperature": 0.5, "min_p": 0.1}, (2,))
    assert profile_kwargs(hf) == {
        "do_sample": True,
        "temperature": 0.5,
        "top_k": 50,
        "top_p": 1.0,
        "min_p": 0.1,
        "repetition_penalty": 1.0,
    }
    assert profile_kwargs(build("transformers", {}, (2,)), library_defaults=True) == {"do_sample": True}
    with pytest.raises(CheckError, match="library_defaults"):
        profile_kwargs(hf, library_defaults=True)
    with pytest.raises(CheckError, match="llama.cpp"):
        profile_kwargs(build("llama.cpp", {}, (2,)))


def test_sampling_keywords_state_every_filter() -> None:
    from verispec.peers.transformers_peer import sampling_kwargs

    kwargs = sampling_kwargs(SamplingParams(temperature=0.8, top_k=0, top_p=0.9, repeat_penalty=1.2))
    assert kwargs == {
        "do_sample": True,
        "temperature": 0.8,
        "top_k": 0,
        "top_p": 0.9,
        "min_p": None,
        "repetition_penalty": 1.2,
    }  # top_k 0 sent: unset, transformers would use 50
    assert sampling_kwargs(SamplingParams(temperature=1.0, top_k=50), library_defaults=True) == {"do_sample": True}
    with pytest.raises(CheckError, match="library_defaults"):
        sampling_kwargs(SamplingParams(temperature=1.0, top_k=0), library_defaults=True)
    with pytest.raises(CheckError, match="logit_bias"):
        sampling_kwargs(SamplingParams(logit_bias={3: -1.0}))
    with pytest.raises(CheckError, match="greedy"):
        sampling_kwargs(SamplingParams(temperature=0.0))


def test_laws_coincide_only_where_transformers_order_and_window_agree() -> None:
    from verispec.peers.transformers_peer import laws_coincide

    assert laws_coincide(SamplingParams(temperature=0.7, top_k=8), 200)  # top-k: the same set at any T
    assert laws_coincide(SamplingParams(temperature=1.0, top_p=0.9, min_p=0.05), 200)
    assert not laws_coincide(SamplingParams(temperature=0.7, top_p=0.9), 10)  # tempered vs untempered top-p
    assert not laws_coincide(SamplingParams(temperature=0.7, min_p=0.05), 10)
    assert laws_coincide(SamplingParams(repeat_penalty=1.3), 64)
    assert not laws_coincide(SamplingParams(repeat_penalty=1.3), 65)  # window 64 vs the whole sequence
    assert laws_coincide(SamplingParams(repeat_penalty=1.3, repeat_last_n=-1), 500)


def test_an_unknown_path_or_a_missing_assistant_is_a_usage_error(files: dict[str, Path]) -> None:
    from verispec.peers.transformers_peer import engine

    with pytest.raises(CheckError, match="unknown transformers path"):
        engine(files["target"], "medusa")
    with pytest.raises(CheckError, match="assistant GGUF"):
        engine(files["target"], "universal")


def test_the_example_adapter_runs_on_the_shipped_adapters_parts(files: dict[str, Path]) -> None:
    """examples/transformers_decoder.py builds on verispec/peers/transformers_peer.py (its loader and
    its truncated assistant): the assisted example passes greedy mode on the tiny target, and a
    layer count out of range is the shipped adapter's typed error."""
    from examples.transformers_decoder import TransformersLookupDecoder, load_target
    from verispec.peers.transformers_peer import load_causal_lm

    assert load_target(files["target"]) is load_causal_lm(files["target"])  # one model per process and path
    report = check_decoder(
        lambda p: TransformersLookupDecoder(p, assistant_layers=1),
        model=files["target"],
        greedy=True,
        max_tokens=16,
        prompts=(PROMPT,),
    )
    assert report.passed, report.results[0].detail
    with pytest.raises(CheckError, match="assistant layers must be in"):
        TransformersLookupDecoder(files["target"], assistant_layers=3)  # the target has 3 layers


@pytest.mark.parametrize("path", ["prompt-lookup", "assisted"])
def test_the_adapters_tokens_are_transformers_own_generate_under_no_grad(files: dict[str, Path], path: str) -> None:
    """The adapter runs generate() under inference_mode (no autograd bookkeeping): the same seed
    gives the very tokens of a direct model.generate() under no_grad with the same keywords, so
    the speed-up changes nothing the gate judges (assisted: its KV-cache crops included)."""
    import torch

    from verispec.peers.transformers_peer import sampling_kwargs

    peer = _factory(files, path)(files["target"])
    params = SamplingParams(temperature=0.8, top_k=20, top_p=0.95)
    prompt = [1, 5, 7, 9, 11]
    got = peer.generate(prompt, params, 16, 2, seed=11)
    torch.manual_seed(11)
    ids = torch.tensor([prompt])
    with torch.no_grad():
        direct = [
            peer.model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=16,
                num_beams=1,
                pad_token_id=peer.model.config.eos_token_id,
                **peer.speculation.kwargs(),
                **sampling_kwargs(params),
            )[0, len(prompt) :].tolist()
            for _ in range(2)
        ]
    assert got == direct and all(len(g) == 16 or g[-1] == peer.model.config.eos_token_id for g in got)


def test_prompt_lookup_drafts_nothing_under_a_repetition_penalty_with_top_k(files: dict[str, Path]) -> None:
    """transformers 5.24's prompt lookup refuses a drafted token that its processors map to -inf on
    all-ones logits; a repetition penalty lowers every context token there, below top-k's tie at
    the cut, and every prompt-lookup draft is a context token. So with both (the ``hf-all`` set)
    the path never speculates: its verdict is on plain sampling through the assisted loop. Without
    them the same prompt and seed draft (tests/support/peer_cost.py counts the cycles)."""
    from tests.support.peer_cost import CycleCounter

    peer = _factory(files, "prompt-lookup")(files["target"])
    prompt = [1, 5, 7, 9, 11, 13, 15, 17]
    drafted = {}
    for name, params in {
        "penalty and top-k": SamplingParams(temperature=0.8, top_k=20, repeat_penalty=1.3),
        "neither": SamplingParams(temperature=0.8, top_k=0, repeat_penalty=1.0),
    }.items():
        counter = CycleCounter()
        with counter.installed():
            peer.generate(prompt, params, 32, 2, seed=3)
        assert counter.cycles > 0
        drafted[name] = counter.drafted
    assert drafted["penalty and top-k"] == 0 and drafted["neither"] > 0, drafted


def test_the_runners_own_layers_assistant_is_the_targets_first_layers(files: dict[str, Path]) -> None:
    """``python -m tests.support.peer_verdicts --assistant-layers 2`` (and its workers'
    ``ENGINES.assisted_first2``) drafts with the target's own first two layers, not the 1-layer file
    of another seed, and its JSON row says so; the default keeps the file."""
    import torch

    from tests.support.peer_verdicts import ENGINES, assistant_text, engine_name, summary_row

    own = getattr(ENGINES, engine_name("assisted", False, 2).rsplit(".", 1)[1])(files["target"])
    assistant = own.speculation.assistant
    assert assistant.config.num_hidden_layers == 2
    target_embedding = own.model.get_input_embeddings().weight
    assert torch.equal(assistant.get_input_embeddings().weight, target_embedding)
    default = getattr(ENGINES, engine_name("assisted", False).rsplit(".", 1)[1])(files["target"])
    assert default.speculation.assistant.config.num_hidden_layers == 1
    assert not torch.equal(default.speculation.assistant.get_input_embeddings().weight, target_embedding)
    assert assistant_text("assisted", files, 2) == "the target's first 2 layers"
    assert assistant_text("assisted", files, None) == files["assistant"].name
    row = {
        "peer": "transformers",
        "version": "5",
        "path": "assisted",
        "assistant": "the target's first 2 layers",
        "params": "hf-all",
        "law": "transformers",
        "flags": {},
        "fraction": 0.1,
        "state": "passed",
        "tokens": 2,
        "design_tokens": 1,
        "power": 0.99,
        "minutes": 1.0,
        "load_at_start": 0.5,
    }
    assert "| assisted (assistant: the target's first 2 layers) |" in summary_row(row, "COMMAND")
    report = check_decoder(
        engine_name("assisted", False, 2),
        model=files["target"],
        temperature=0.7,
        top_k=0,
        repeat_penalty=1.0,
        workers=1,
        **SMOKE,
    )
    assert report.passed, report.results[0].detail
