"""Deferred KV catch-up is exact: after ANY pattern of early exits the cache equals a full forward's.

A token that exits at depth k leaves layers k..L-1 owed; later tokens catch them up (batched, per
layer) only when they go deeper, or when the backlog bound forces it. The property: for every
exit pattern and bound, (1) the hidden state each token sees at its exit depth equals the full
model's hidden state at that depth (so no token ever read an owed, unwritten K/V), and (2) after
``settle()`` every cached K/V equals the cache of a plain full forward of the same tokens.

Float tolerance (derived, not measured): the catch-up runs owed rows as one batched pass, the full
forward runs another shape, so BLAS may sum in another order and the float32 results differ in
the last bits (on an AVX2 machine one K element by 4.3e-5). Both are float32 evaluations of one
exact function, so each element may differ by at most the sum of the two rounding errors. The
tolerance of each element is tests/support/tolerances.py's ``2 lambda sigma``: sigma is that element's
float32 rounding spread under the probabilistic rounding model (every operation off by a relative
u = 2^-24, a dot product of length n by u sqrt(n) |a|.|b| in any summation order), propagated
through the 5 layers by Monte Carlo in float64. For these models it stays below 1e-2 (asserted in
``test_the_tolerance_is_far_below_a_missing_kv``), while an owed K/V read as 0 moves values by O(1)
(the two mutant tests below show the check still catches both ways of getting it wrong).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.profiles import examples
from tests.support.tolerances import ForwardSpread, assert_within, forward_spread
from verispec.reference.config import ACT_GELU_TANH, ACT_SILU, ROPE_NEOX, ROPE_NORM, Config
from verispec.reference.early_exit import DeferredDecoder
from verispec.reference.early_exit import Model as ModelLike
from verispec.reference.model import LayerWeights, Model, Weights

N_LAYER = 5


def tiny_model(arch: str, seed: int = 0) -> Model:
    """A random model with 5 layers, built directly (gemma3: sliding window 3, post-norms)."""
    rng = np.random.default_rng(seed)
    n_vocab, e, n_head, n_kv, d, ff = 40, 24, 4, 2, 6, 32
    gemma = arch == "gemma3"
    cfg = Config(
        arch=arch,
        n_vocab=n_vocab,
        n_embd=e,
        n_layer=N_LAYER,
        n_head=n_head,
        n_head_kv=n_kv,
        head_dim=d,
        n_ff=ff,
        rope_base=10000.0,
        rope_base_local=10000.0,
        rope_dim=d,
        rope_type=ROPE_NEOX if gemma else ROPE_NORM,
        rope_scaling_type="none",
        rope_scaling_factor=1.0,
        norm_eps=1e-6,
        sliding_window=3 if gemma else 0,
        sliding_layers=tuple(gemma and il % 2 == 0 for il in range(N_LAYER)),
        context_length=64,
        final_softcap=30.0 if gemma else None,
        embed_scale=math.sqrt(e) if gemma else 1.0,
        attn_scale=1.0 / math.sqrt(d),
        ffn_activation=ACT_GELU_TANH if gemma else ACT_SILU,
        qk_norm=gemma,
        post_norms=gemma,
    )

    def w(*shape: int) -> npt.NDArray[np.float32]:
        return np.asarray(rng.standard_normal(shape) / np.sqrt(shape[-1]), dtype=np.float32)

    def norm(n: int) -> npt.NDArray[np.float32]:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    blocks = tuple(
        LayerWeights(
            attn_norm=norm(e),
            wq=w(n_head * d, e) * 3,
            wk=w(n_kv * d, e) * 3,
            wv=w(n_kv * d, e),
            wo=w(e, n_head * d),
            ffn_norm=norm(e),
            ffn_gate=w(ff, e),
            ffn_up=w(ff, e),
            ffn_down=w(e, ff),
            q_norm=norm(d) if gemma else None,
            k_norm=norm(d) if gemma else None,
            post_attn_norm=norm(e) if gemma else None,
            post_ffn_norm=norm(e) if gemma else None,
        )
        for _ in range(N_LAYER)
    )
    embd = (rng.standard_normal((n_vocab, e)) * 0.5).astype(np.float32)
    return Model(cfg, Weights(embd, norm(e), embd, None, blocks))


MODELS = {"llama": tiny_model("llama"), "gemma3": tiny_model("gemma3", seed=1)}


@functools.cache
def tiny_spread(arch: str, tokens: tuple[int, ...]) -> ForwardSpread:
    """The derived tolerances of a tiny model's forward (the property test meets each sequence
    many times: ~0.1 s each, computed once)."""
    return forward_spread(MODELS[arch], tokens, head=False)


def run_pattern(
    model: ModelLike,
    prompt: list[int],
    tokens: list[int],
    exits: list[int],
    candidates: tuple[int, ...],
    bound: int,
    decoder_class: type[DeferredDecoder] = DeferredDecoder,
    decoder_model: ModelLike | None = None,
    spread: ForwardSpread | None = None,
) -> None:
    """Decode ``tokens`` after ``prompt`` exiting token i at depth ``exits[i]``; check both claims
    against a full forward, elementwise within the derived float32 tolerances ``spread`` of that
    forward (tests/support/tolerances.py; default: computed from ``model``, a tiny model of MODELS).
    ``decoder_model`` (default ``model``) runs the decoder: another rounding of the same model."""
    full_cache = model.new_cache(len(prompt) + len(tokens))
    full = model.forward(prompt + tokens, full_cache, return_hidden=True)
    assert full.hidden is not None
    if spread is None:
        arch = next(name for name, tiny in MODELS.items() if tiny is model)
        spread = tiny_spread(arch, tuple(prompt + tokens))

    cache = model.new_cache(len(prompt) + len(tokens))
    decoder = decoder_class(decoder_model or model, cache, candidates, backlog_bound=bound)
    decoder.prefill(prompt)
    for i, (token, want) in enumerate(zip(tokens, exits)):

        def policy(depth: int, hidden: npt.NDArray[np.float32], want: int = want) -> bool:
            return depth == want

        depth, hidden = decoder.step(token, policy)
        assert depth == want
        slot = len(prompt) + i
        assert_within(hidden[0], full.hidden[want, slot], spread.hidden.tolerance[want, slot], f"hidden of slot {slot}")
        assert len(decoder.backlog) < bound
    decoder.settle()
    assert decoder.owed_layers == 0
    n = len(prompt) + len(tokens)
    assert cache.length == n
    assert_within(cache.k[:, :, :n], full_cache.k[:, :, :n], spread.k.tolerance, "K cache")
    assert_within(cache.v[:, :, :n], full_cache.v[:, :, :n], spread.v.tolerance, "V cache")
    assert np.array_equal(cache.positions[:n], full_cache.positions[:n])


@settings(max_examples=examples(60))
@given(
    arch=st.sampled_from(sorted(MODELS)),
    data=st.data(),
    bound=st.integers(1, 6),
    n_prompt=st.integers(1, 4),
)
def test_any_exit_pattern_gives_the_full_cache(arch: str, data: st.DataObject, bound: int, n_prompt: int) -> None:
    model = MODELS[arch]
    candidates = tuple(sorted(data.draw(st.sets(st.integers(1, N_LAYER - 1), min_size=1), label="candidates")))
    exits = data.draw(st.lists(st.sampled_from(candidates + (N_LAYER,)), min_size=1, max_size=12), label="exits")
    rng = np.random.default_rng(len(exits) * 7 + n_prompt)
    prompt = [int(t) for t in rng.integers(0, model.config.n_vocab, n_prompt)]
    tokens = [int(t) for t in rng.integers(0, model.config.n_vocab, len(exits))]
    run_pattern(model, prompt, tokens, exits, candidates, bound)


def test_interleaved_depths_need_separate_runs() -> None:
    """Owed rows at different depths (slot 5 at 1, slot 6 at 3) make non-contiguous runs per layer."""
    model = MODELS["llama"]
    run_pattern(model, [1, 2, 3], [4, 5, 6, 7, 8, 9], [1, 3, 1, 4, 2, 5], (1, 2, 3, 4), bound=10)


def test_skipping_the_catch_up_is_caught() -> None:
    """Teeth: a decoder that forgets owed rows (never catches up) fails the cache check."""
    model = MODELS["llama"]

    class Forgetful(DeferredDecoder):
        def settle(self) -> None:
            self.backlog = []

    with pytest.raises(AssertionError):
        run_pattern(model, [1, 2], [3, 4, 5], [2, 2, 2], (2,), bound=10, decoder_class=Forgetful)


def test_reading_owed_layers_is_caught() -> None:
    """Teeth: a decoder that runs only the current token (owed rows not caught up in its pass)
    reads unwritten K/V, and the hidden-state check at the exit depth fails."""
    model = MODELS["llama"]

    class Blind(DeferredDecoder):
        def _run_segment(
            self, first: int, stop: int, current: tuple[int, int, npt.NDArray[np.float32]] | None
        ) -> npt.NDArray[np.float32] | None:
            if current is None:
                return super()._run_segment(first, stop, None)
            slot, position, x = current
            return self.model.forward_layers(x, self.cache, first, stop - 1, [position], start=slot)

    with pytest.raises(AssertionError):
        run_pattern(model, [1, 2], [3, 4, 5], [1, 5, 5], (1,), bound=10, decoder_class=Blind)


def _sequential_linear(
    x: npt.NDArray[np.float32], weight: npt.NDArray[np.float32], bias: npt.NDArray[np.float32] | None = None
) -> npt.NDArray[np.float32]:
    """layers.linear with another rounding than any BLAS: float32 products summed one by one, last
    term first, no FMA (the error model's worst summation order)."""
    acc = np.zeros((x.shape[0], weight.shape[0]), dtype=np.float32)
    for j in reversed(range(x.shape[1])):
        acc = acc + x[:, j : j + 1] * weight[:, j][None, :]
    return acc if bias is None else acc + bias


def _wide_linear(
    x: npt.NDArray[np.float32], weight: npt.NDArray[np.float32], bias: npt.NDArray[np.float32] | None = None
) -> npt.NDArray[np.float32]:
    """layers.linear as a BLAS with a float64 accumulator would do it: one rounding at the end."""
    y = (np.asarray(x, dtype=np.float64) @ np.asarray(weight, dtype=np.float64).T).astype(np.float32)
    return y if bias is None else y + bias


@pytest.mark.parametrize("linear", [_sequential_linear, _wide_linear], ids=["sequential", "wide"])
@pytest.mark.parametrize("arch", sorted(MODELS))
def test_the_tolerance_holds_for_another_blas(arch: str, linear: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tolerance is not tuned to this machine's BLAS: a decoder whose every projection rounds
    as another BLAS could (sequential float32 sums in reverse; float64 accumulation) still agrees
    with the full forward run by this machine's BLAS. (With OPENBLAS_CORETYPE=Haswell, an AVX2
    kernel, the old hand-picked rtol 1e-4 / atol 2e-5 failed here; see docs/testing.md.)"""
    from verispec.reference import layers

    model = MODELS[arch]

    class OtherBlas(Model):
        def forward_layers(self, *args: object, **kwargs: object) -> npt.NDArray[np.float32]:
            with monkeypatch.context() as patch:
                patch.setattr(layers, "linear", linear)
                return super().forward_layers(*args, **kwargs)  # type: ignore[arg-type]

    other = OtherBlas(model.config, model.weights)
    run_pattern(
        model,
        [1, 2, 3],
        [4, 5, 6, 7, 8, 9, 10, 11],
        [1, 3, 1, 4, 2, 5, 1, 5],
        (1, 2, 3, 4),
        bound=3,
        decoder_model=other,
    )


@pytest.mark.parametrize("arch", sorted(MODELS))
def test_the_tolerance_is_far_below_a_missing_kv(arch: str) -> None:
    """Teeth in numbers: over the longest sequence the property test draws (4 + 12 tokens), the
    largest derived tolerance on hidden states and K/V is below 1e-2, while an owed K/V read as 0
    moves them by O(1): the K/V entries themselves are O(1) (their RMS is asserted > 0.3)."""
    model = MODELS[arch]
    tokens = tuple(int(t) for t in np.random.default_rng(0).integers(0, model.config.n_vocab, 16))
    spread = tiny_spread(arch, tokens)
    for part in (spread.hidden, spread.k, spread.v):
        assert float(part.tolerance.max()) < 1e-2
        assert float(np.sqrt(np.mean(part.value**2))) > 0.3


REAL_PROMPT, REAL_TOKENS = [1, 504, 3458], [504, 3458, 282, 4649, 314, 260, 1345, 28, 357, 469]


@pytest.fixture(scope="module")
def smollm2_exit_spread(smollm2_model: Model) -> ForwardSpread:
    """The derived tolerances of the real-model test's forward, computed once for both engines:
    both compute the same exact function from the same float32 weights, so one spread (16 samples,
    ~10 s here; lambda = 31; without the 49k-row head) is the tolerance of either."""
    return forward_spread(smollm2_model, tuple(REAL_PROMPT + REAL_TOKENS), head=False, samples=16)


@pytest.mark.model
@pytest.mark.parametrize("engine", ["reference", "fast"])
def test_real_model_exit_pattern_gives_the_full_cache(
    engine: str, smollm2_model: Model, f32_real_model: Any, smollm2_exit_spread: ForwardSpread
) -> None:
    """SmolLM2-135M on both engines: 10 tokens exiting at mixed depths (with a forced catch-up)
    -> the full cache. Both are the session's loaded models (tests/conftest.py: the reference, and
    the fast engine's default f32 mode, ``load_model(path, engine="fast")``)."""
    model: ModelLike = smollm2_model if engine == "reference" else f32_real_model("smollm2-135m")
    exits = [8, 30, 24, 8, 16, 30, 8, 24, 8, 30]
    run_pattern(model, REAL_PROMPT, REAL_TOKENS, exits, (8, 16, 24), bound=4, spread=smollm2_exit_spread)
