"""The law profiles (spec/decoder/laws/): each op of each ecosystem's chain on hand-checkable vectors
(spec/vectors/laws/*.json: logits ln(w) of small rationals, exact rational probabilities), the
default profile identical to THE target law, and the flags each profile has."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from verispec.reference.errors import SamplingError
from verispec.reference.sampling import SamplingParams, target_distribution
from verispec.spec import vectors as vectors_package
from verispec.spec.decoder import laws
from verispec.spec.decoder.depth.law import DepthCase, case_law, position_params

VECTORS = Path(vectors_package.__file__).parent / "laws"  # shipped as package data


def _number(value: Any) -> Any:
    """``{"ln": "p/q"}`` is ln(p/q) in float64; anything else is itself."""
    if isinstance(value, dict) and set(value) == {"ln"} and isinstance(value["ln"], str):
        return math.log(Fraction(value["ln"]))
    return value


def _params(raw: dict[str, Any]) -> dict[str, Any]:
    out = {k: _number(v) for k, v in raw.items()}
    if "logit_bias" in out:
        out["logit_bias"] = [[t, _number(b)] for t, b in out["logit_bias"]]
    return out


def _cases() -> list[tuple[str, dict[str, Any], float]]:
    found = []
    for path in sorted(VECTORS.glob("*.json")):
        doc = json.loads(path.read_text())
        found += [(doc["law"], case, float(doc["tolerance"])) for case in doc["cases"]]
    return found


CASES = _cases()


def test_every_profile_has_vectors() -> None:
    assert sorted({name for name, _, _ in CASES}) == sorted(laws.NAMES)


@pytest.mark.parametrize(("name", "case", "tolerance"), CASES, ids=[f"{n}/{c['id']}" for n, c, _ in CASES])
def test_vector(name: str, case: dict[str, Any], tolerance: float) -> None:
    logits = np.array([math.log(Fraction(w)) for w in case["logits"]["ln"]], dtype=np.float64)
    wire = {"name": name, "params": _params(case["params"])}
    if case["expected"] == {"error": True}:
        with pytest.raises(SamplingError):
            laws.from_json(wire)(logits, case["prompt_ids"], case["output_ids"])
        return
    probs = laws.from_json(wire)(logits, case["prompt_ids"], case["output_ids"])
    expected = [Fraction(p) for p in case["expected"]]
    assert len(probs) == len(expected)
    errors = [abs(float(p) - float(e)) for p, e in zip(probs, expected)]
    assert max(errors) <= tolerance, (case["id"], probs.tolist(), [str(e) for e in expected])
    assert [p == 0 for p in probs] == [e == 0 for e in expected], "the support is exact"


def test_default_profile_is_the_target_law() -> None:
    """The verispec profile gives bit for bit what the depth test computed before the profiles:
    target_distribution(logits, prompt + output, position_params(case, t))."""
    rng = np.random.default_rng(20261201)
    for trial in range(60):
        vocab = int(rng.integers(4, 40))
        params = SamplingParams(
            temperature=float(rng.choice([0.0, 0.7, 1.0, 1.6])),
            top_k=int(rng.integers(0, 6)),
            top_p=float(rng.choice([1.0, 0.8])),
            min_p=float(rng.choice([0.0, 0.1])),
            repeat_penalty=float(rng.choice([1.0, 1.5])),
            repeat_last_n=int(rng.choice([-1, 0, 3, 64])),
        )
        eog = frozenset({int(rng.integers(vocab))})
        case = DepthCase(tuple(int(t) for t in rng.integers(vocab, size=3)), params, 16, eog, int(rng.integers(0, 4)))
        output = [int(t) for t in rng.integers(vocab, size=int(rng.integers(0, 6)))]
        logits = rng.normal(size=vocab).astype(np.float32)
        ours = case_law(case)(logits, case.prompt_ids, output)
        before = target_distribution(logits, list(case.prompt_ids) + output, position_params(case, len(output)))
        assert np.array_equal(ours, before), trial


def test_ecosystem_defaults() -> None:
    """Unset flags take each ecosystem's own defaults."""
    assert laws.build("transformers", {}).params.top_k == 50  # GenerationConfig's default with do_sample
    llama = laws.build("llama.cpp", {}).params
    assert (llama.temp, llama.top_k, llama.top_p, llama.min_p, llama.penalty_last_n) == (0.8, 40, 0.95, 0.05, 64)
    vllm = laws.build("vllm", {}).params
    assert (vllm.temperature, vllm.top_k, vllm.top_p, vllm.min_p) == (1.0, 0, 1.0, 0.0)
    verispec = laws.build("verispec", {}).params.sampling  # check-decoder's own defaults, unchanged
    assert (verispec.temperature, verispec.top_k, verispec.repeat_penalty) == (1.0, 4, 1.5)


def test_flags_and_names() -> None:
    transformers = laws.build("transformers", {"temperature": 0.7, "top_k": 5, "min_tokens": 3}, eog=[2, 7])
    assert transformers.params.min_new_tokens == 3 and transformers.params.eos_token_id == (2, 7)
    assert laws.min_tokens_of(transformers) == 3
    vllm = laws.build("vllm", {"frequency_penalty": 0.5, "min_tokens": 2}, eog=[1])
    assert vllm.params.stop_ids == frozenset({1}) and laws.min_tokens_of(vllm) == 2
    assert laws.build("llama.cpp", {"temperature": 0.5}).params.temp == 0.5


@pytest.mark.parametrize(
    ("name", "flag", "message"),
    [
        ("transformers", "frequency_penalty", "--frequency-penalty is not a parameter of --law transformers"),
        ("transformers", "repeat_penalty", "--repeat-penalty is not a parameter of --law transformers"),
        ("llama.cpp", "min_tokens", "--min-tokens is not a parameter of --law llama.cpp"),
        ("vllm", "penalty_last_n", "--penalty-last-n is not a parameter of --law vllm"),
        ("verispec", "presence_penalty", "--presence-penalty is not a parameter of --law verispec"),
    ],
)
def test_foreign_flag_is_a_usage_error(name: str, flag: str, message: str) -> None:
    with pytest.raises(SamplingError, match=message) as caught:
        laws.build(name, {flag: 1.0})
    assert caught.value.exit_category == "usage"


def test_bad_values_are_typed_one_line_errors() -> None:
    for name, flags in [
        ("vllm", {"presence_penalty": 3.0}),
        ("transformers", {"temperature": 0.0}),
        ("llama.cpp", {"top_p": 2.0}),
        ("verispec", {"top_k": -1}),
        ("vllm", {"top_k": -2}),
    ]:
        with pytest.raises(SamplingError) as caught:
            laws.build(name, flags)
        assert "\n" not in str(caught.value)
    with pytest.raises(SamplingError, match="unknown law"):
        laws.build("sglang", {})


def test_wire_round_trip() -> None:
    for name in laws.NAMES:
        profile = laws.build(name, {}, eog=[3])
        assert laws.from_json(json.loads(json.dumps(profile.to_json()))) == profile


def test_bad_rows_and_histories() -> None:
    for name in laws.NAMES:
        profile = laws.build(name, {})
        with pytest.raises(SamplingError, match="non-finite"):
            profile(np.array([0.0, np.nan]), [], [])
        with pytest.raises(SamplingError, match="not a token id"):
            profile(np.zeros(3), [5], [])
