"""Our float32 reference forward against transformers' float32 forward on the two real models.

Both sides dequantize the same GGUF file (we with reference/quants.py, transformers with gguf-py),
so the only admissible difference is float32 rounding in a different order of operations. The
tolerance is therefore absolute and tight: max |Δlogit| <= 1e-3 on logits of magnitude ~20-30
(measured: ~6e-5 on smollm2-135m, ~4e-5 on gemma3-270m). A wrong RoPE pairing, a norm offset, a
missed scale or a GQA mix-up moves logits by O(1) and fails at once.

Greedy agreement for 64 tokens is checked without transformers' slow token-by-token generate():
we decode greedily through our KV cache, then transformers scores prompt + continuation in one
causal forward; the continuations are identical iff transformers' argmax at every step is our
token (by induction on the steps), and the cached logits must match its logits row for row.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.hf_oracle import hf_logits, load_hf_model
from verispec.reference.model import Model
from verispec.reference.tokenizer import Tokenizer

# One BLAS thread (conftest.blas_single_thread): the token-by-token decode is many small matmuls,
# for which BLAS threads on a shared 2-core runner cost more than they give.
pytestmark = [pytest.mark.oracle, pytest.mark.model, pytest.mark.slow, pytest.mark.usefixtures("blas_single_thread")]

LOGIT_TOL = 1e-3  # absolute, float32 vs float32 on identical dequantized weights
# Not a per-element derived tolerance (tests/support/tolerances.py), and why: transformers is another float32
# function, not another rounding order of ours: it computes RoPE angles in float32 (pos * inv_freq,
# off by ~u * pos radians, beyond the per-op rounding the spread model charges) and its own op order
# in norms and attention. Deriving it would need a model of transformers' kernels; a float64 spread of
# the 262k-row gemma3 head over 70 positions also costs minutes. So 1e-3 is NOT derived: it is a
# margin over measured differences (~6e-5), tighter than the derived spread of our own forward on
# the real models (~0.02-0.07, tests/test_engine.py), and could fail where transformers' kernels
# round differently (the derived tolerances of tests/support/tolerances.py).
N_GREEDY = 64

PROMPTS = (
    "The capital of France is",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "Certified fast decoding keeps what the model says, token for token, because",
)


def _encode(tok: Tokenizer, text: str) -> list[int]:
    return [int(t) for t in tok.encode(text, add_bos=tok.add_bos)]


def greedy_with_cache(model: Model, prompt: list[int], n_new: int) -> tuple[list[int], np.ndarray]:
    """Our greedy decode: prefill, then one cached forward per token -> (tokens, logits [n_new, V]).

    Row i of the logits is the distribution that chose token i.
    """
    cache = model.new_cache(len(prompt) + n_new)
    logits = model.forward(prompt, cache).logits[-1]
    chosen: list[int] = []
    rows = []
    for _ in range(n_new):
        rows.append(logits)
        token = int(np.argmax(logits))
        chosen.append(token)
        logits = model.forward([token], cache).logits[-1]
    return chosen, np.stack(rows)


@pytest.fixture(scope="module", params=["smollm2-135m", "gemma3-270m"])
def pair(request: pytest.FixtureRequest) -> tuple[str, Model, Any, Tokenizer]:
    """(name, our model, transformers' model, tokenizer) for one real model."""
    name: str = request.param
    fixture = "smollm2" if name.startswith("smollm2") else "gemma3"
    path: Path = request.getfixturevalue(f"{fixture}_path")
    ours: Model = request.getfixturevalue(f"{fixture}_model")
    return name, ours, load_hf_model(path), Tokenizer.from_file(path)


def test_prompt_logits_match_transformers(pair: tuple[str, Model, Any, Tokenizer]) -> None:
    name, ours, hf, tok = pair
    for text in PROMPTS:
        ids = _encode(tok, text)
        expected = hf_logits(hf, ids)  # [T, V]
        got = ours.forward(ids, ours.new_cache(len(ids))).logits
        assert got.shape == expected.shape
        delta = float(np.max(np.abs(got - expected)))
        assert delta <= LOGIT_TOL, f"{name} {text!r}: max |Δlogit| {delta:.3g} > {LOGIT_TOL}"
        assert np.array_equal(got.argmax(-1), expected.argmax(-1)), f"{name} {text!r}: argmax differs"


def test_greedy_64_tokens_match_transformers(pair: tuple[str, Model, Any, Tokenizer]) -> None:
    name, ours, hf, tok = pair
    ids = _encode(tok, PROMPTS[0])
    chosen, our_rows = greedy_with_cache(ours, ids, N_GREEDY)
    expected = hf_logits(hf, ids + chosen)[len(ids) - 1 : -1]  # [N_GREEDY, V]: row i chose token i
    hf_choice = [int(t) for t in expected.argmax(-1)]
    first_diff = next((i for i, (a, b) in enumerate(zip(chosen, hf_choice)) if a != b), None)
    assert first_diff is None, (
        f"{name}: greedy continuations diverge at step {first_diff}: ours {chosen[first_diff]}, "
        f"transformers {hf_choice[first_diff]}"
    )
    delta = float(np.max(np.abs(our_rows - expected)))
    assert delta <= LOGIT_TOL, f"{name}: cached-decode max |Δlogit| {delta:.3g} > {LOGIT_TOL}"
