"""reference/model.py, config.py, layers.py on tiny synthetic GGUF models and the two real ones.

The forward is checked against a deliberately naive re-statement written here (one token, one head
at a time, RoPE as complex multiplication, the sliding window as an explicit position test), so a
shared mistake would have to be made twice, in two different styles.

Float tolerances are derived, never hand-picked (tests/support/tolerances.py): a whole forward may differ
from another float32 evaluation of it (another batching, positions, split) or from the float64
restatement by 2 lambda sigma per element, sigma its float32 rounding spread under the probabilistic
rounding model propagated through the layers (the naive restatement's exact constants differ from
the float32 ones by one rounding each, which the second sigma covers); a single layers.py function
by Higham's worst-case bound of its few roundings.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.tolerances import (
    assert_within,
    forward_spread,
    gelu_tanh_rounding_bound,
    rms_norm_rounding_bound,
    rope_rounding_bound,
    silu_rounding_bound,
)
from verispec.reference import layers
from verispec.reference.config import Config
from verispec.reference.errors import ContextOverflow, ModelError, UnsupportedArchitecture
from verispec.reference.gguf import GGUFFile
from verispec.reference.model import Model

# -- an independent, naive forward -------------------------------------------------------------------

pytestmark = pytest.mark.usefixtures("blas_single_thread")


def _rms(x: Any, w: Any, eps: float) -> Any:
    x = np.asarray(x, dtype=np.float64)
    return x / math.sqrt(float(np.mean(x * x)) + eps) * w


def _rotate(vec: Any, pos: int, base: float, scale: float, neox: bool) -> Any:
    """RoPE of one head vector as complex multiplication by exp(i * pos * scale * base^(-2j/d))."""
    d = vec.shape[0]
    half = d // 2
    if neox:
        z = vec[:half] + 1j * vec[half:]
    else:
        z = vec[0::2] + 1j * vec[1::2]
    freqs = np.array([base ** (-2.0 * j / d) for j in range(half)])
    z = z * np.exp(1j * pos * scale * freqs)
    out = np.empty(d)
    if neox:
        out[:half], out[half:] = z.real, z.imag
    else:
        out[0::2], out[1::2] = z.real, z.imag
    return out


def _gelu_tanh(x: Any) -> Any:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def naive_logits(model: Model, tokens: list[int]) -> Any:
    """Logits [T, V] of ``tokens`` at positions 0..T-1, float64, one token and one head at a time."""
    cfg, w = model.config, model.weights
    d = cfg.head_dim
    xs = [w.token_embd[t].astype(np.float64) * cfg.embed_scale for t in tokens]
    for il, lw in enumerate(w.layers):
        keys: list[list[Any]] = []  # [pos][kv head]
        values: list[list[Any]] = []
        outs = []
        base = cfg.layer_rope_base(il)
        scale = cfg.layer_rope_freq_scale(il)
        for pos, x in enumerate(xs):
            h = _rms(x, lw.attn_norm, cfg.norm_eps)
            q = (lw.wq @ h).reshape(cfg.n_head, d)
            k = (lw.wk @ h).reshape(cfg.n_head_kv, d)
            v = (lw.wv @ h).reshape(cfg.n_head_kv, d)
            if cfg.qk_norm:
                q = np.stack([_rms(qh, lw.q_norm, cfg.norm_eps) for qh in q])
                k = np.stack([_rms(kh, lw.k_norm, cfg.norm_eps) for kh in k])
            neox = cfg.rope_type == "neox"
            q = np.stack([_rotate(qh, pos, base, scale, neox) for qh in q])
            k = np.stack([_rotate(kh, pos, base, scale, neox) for kh in k])
            keys.append(list(k))
            values.append(list(v))
            heads = []
            for hq in range(cfg.n_head):
                kv = hq // (cfg.n_head // cfg.n_head_kv)
                visible = [
                    p
                    for p in range(pos + 1)
                    if not (cfg.is_sliding(il) and cfg.sliding_window and pos - p >= cfg.sliding_window)
                ]
                scores = np.array([q[hq] @ keys[p][kv] for p in visible]) * cfg.attn_scale
                weights = np.exp(scores - scores.max())
                weights /= weights.sum()
                heads.append(sum(wt * values[p][kv] for wt, p in zip(weights, visible)))
            a = lw.wo @ np.concatenate(heads)
            if cfg.post_norms:
                a = _rms(a, lw.post_attn_norm, cfg.norm_eps)
            outs.append(x + a)
        new_xs = []
        for x in outs:
            h = _rms(x, lw.ffn_norm, cfg.norm_eps)
            g = lw.ffn_gate @ h
            act = g / (1.0 + np.exp(-g)) if cfg.ffn_activation == "silu" else _gelu_tanh(g)
            f = lw.ffn_down @ (act * (lw.ffn_up @ h))
            if cfg.post_norms:
                f = _rms(f, lw.post_ffn_norm, cfg.norm_eps)
            new_xs.append(x + f)
        xs = new_xs
    logits = np.stack([w.output @ _rms(x, w.output_norm, cfg.norm_eps) for x in xs])
    if cfg.final_softcap:
        logits = cfg.final_softcap * np.tanh(logits / cfg.final_softcap)
    return logits


def _logit_tolerance(model: Model, tokens: list[int], positions: list[int] | None = None) -> Any:
    """The derived elementwise tolerance [T, V] of ``model.forward(tokens)``'s logits."""
    spread = forward_spread(model, tuple(tokens), None if positions is None else tuple(positions))
    assert spread.logits is not None
    return spread.logits.tolerance


TOKENS = [5, 17, 3, 60, 22, 9, 9, 41, 0, 33, 12]


@pytest.mark.parametrize(
    "arch, options",
    [
        ("llama", {}),
        ("llama", {"n_head_kv": 1, "tied": False}),
        ("llama", {"n_head": 4, "n_head_kv": 4, "head_dim": 16}),
        ("gemma3", {"n_layer": 7, "sliding_window": 4}),  # layer 5 is global, 0-4, 6 slide
        ("gemma3", {"n_layer": 2, "sliding_window": 3, "softcap": 5.0, "head_dim": 16}),
        ("llama", {"metadata": {"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 4.0}}),
        (
            "gemma3",
            {"n_layer": 6, "metadata": {"gemma3.rope.scaling.type": "linear", "gemma3.rope.scaling.factor": 8.0}},
        ),
    ],
)
def test_forward_matches_naive_restatement(tiny_gguf: Any, arch: str, options: dict[str, Any]) -> None:
    model = Model.load(tiny_gguf(arch, **options))
    got = model.forward(TOKENS, model.new_cache(32)).logits
    assert got.shape == (len(TOKENS), model.config.n_vocab) and got.dtype == np.float32
    assert_within(got, naive_logits(model, TOKENS), _logit_tolerance(model, TOKENS), "forward vs naive")


def test_sliding_window_and_softcap_have_effect(tiny_gguf: Any) -> None:
    """The naive comparison above would pass vacuously if the window never bit or the cap never
    clipped: show that both change the logits of this model."""
    model = Model.load(tiny_gguf("gemma3", n_layer=2, sliding_window=3, softcap=5.0))
    base = model.forward(TOKENS, model.new_cache(32)).logits
    no_window = Model(dataclasses.replace(model.config, sliding_window=0), model.weights)
    no_cap = Model(dataclasses.replace(model.config, final_softcap=None), model.weights)
    w = no_window.forward(TOKENS, no_window.new_cache(32)).logits
    c = no_cap.forward(TOKENS, no_cap.new_cache(32)).logits
    tolerance = _logit_tolerance(model, TOKENS)
    assert_within(base[:3], w[:3], tolerance[:3], "within the window")  # the same function there
    assert np.any(np.abs(base[3:] - w[3:]) > 100 * tolerance[3:])  # past it: the window bites
    assert np.max(np.abs(base)) < 5.0 < np.max(np.abs(c))  # the cap clips
    assert_within(base, 5.0 * np.tanh(c.astype(np.float64) / 5.0), tolerance, "softcap of the uncapped logits")


def test_relative_positions_only(tiny_gguf: Any) -> None:
    """RoPE and the sliding window depend on position differences only: shifting every position
    leaves the logits unchanged (up to float32 rounding)."""
    for arch in ("llama", "gemma3"):
        model = Model.load(tiny_gguf(arch, n_layer=7))
        a = model.forward(TOKENS, model.new_cache(32)).logits
        shifted = list(range(50, 50 + len(TOKENS)))
        b = model.forward(TOKENS, model.new_cache(32), positions=shifted).logits
        # the same function up to the float32 cos/sin of other angles, which the RoPE charge covers
        assert_within(a, b, _logit_tolerance(model, TOKENS), f"{arch} shifted positions")


def test_hidden_states_and_layer_ranges_compose(tiny_gguf: Any) -> None:
    model = Model.load(tiny_gguf("gemma3", n_layer=7))
    full = model.forward(TOKENS, model.new_cache(32), return_hidden=True)
    assert full.hidden is not None and full.hidden.shape == (8, len(TOKENS), model.config.n_embd)
    assert np.array_equal(full.hidden[0], model.embed(TOKENS))
    spread = forward_spread(model, tuple(TOKENS))
    assert spread.logits is not None
    assert_within(model.head(full.hidden[-1]), full.logits, spread.logits.tolerance, "head(hidden[-1])")

    cache = model.new_cache(32)
    positions = list(range(len(TOKENS)))
    h = model.forward_layers(model.embed(TOKENS), cache, 0, 2, positions)
    assert_within(h, full.hidden[3], spread.hidden.tolerance[3], "layers 0..2")
    empty = model.forward_layers(h, cache, 3, 2, positions)  # the empty range
    assert np.array_equal(empty, h)
    h = model.forward_layers(h, cache, 3, 6, positions)
    cache.advance(len(TOKENS))
    assert_within(model.head(h), full.logits, spread.logits.tolerance, "split run's logits")
    # the split run left a usable cache: the next token sees the same context as after `forward`
    ref_cache = model.new_cache(32)
    model.forward(TOKENS, ref_cache)
    nxt = model.forward([7], cache).logits
    assert_within(nxt, model.forward([7], ref_cache).logits, _logit_tolerance(model, TOKENS + [7])[-1:], "next token")

    with pytest.raises(ModelError, match="layer range"):
        model.forward_layers(h, cache, 0, 7, positions)


def test_unsupported_architecture_lists_supported(tiny_gguf: Any) -> None:
    path = tiny_gguf("qwen2")
    with pytest.raises(UnsupportedArchitecture, match=r"'qwen2'.*gemma3, gemma4, llama, phi3"):
        Model.load(path)


@pytest.mark.parametrize("missing", ["blk.1.ffn_up.weight", "output_norm.weight", "blk.0.attn_k_norm.weight"])
def test_missing_tensor_is_named(tiny_gguf: Any, missing: str) -> None:
    path = tiny_gguf("gemma3", skip=(missing,))
    with pytest.raises(ModelError, match=missing.replace(".", r"\.")):
        Model.load(path)


def test_misshapen_tensor_is_named(tiny_gguf: Any, tmp_path: Path) -> None:
    # head_count 4 with key_length 16 wants attn_q [64, 32]; the file's was made for head_dim 8.
    path = tiny_gguf("llama", metadata={"llama.attention.key_length": 16, "llama.attention.value_length": 16})
    with pytest.raises(ModelError, match=r"blk\.0\.attn_q\.weight.*shape"):
        Model.load(path)


def test_refused_rope_scaling(tiny_gguf: Any) -> None:
    path = tiny_gguf("llama", metadata={"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 4.0})
    with pytest.raises(ModelError, match="yarn"):
        Model.load(path)


def test_tied_and_untied_output(tiny_gguf: Any) -> None:
    tied = Model.load(tiny_gguf("llama", tied=True))
    untied = Model.load(tiny_gguf("llama", tied=False))
    assert tied.weights.output is tied.weights.token_embd
    assert untied.weights.output is not untied.weights.token_embd
    assert not np.array_equal(untied.weights.output, untied.weights.token_embd)


def test_non_finite_activation_names_the_layer(tiny_gguf: Any) -> None:
    model = Model.load(tiny_gguf("llama"))
    model.weights.layers[1].ffn_down[0, 0] = np.nan
    cache = model.new_cache(16)
    with pytest.raises(ModelError, match="layer 1"):
        model.forward([1, 2, 3], cache)
    assert cache.length == 0
    model.weights.layers[1].ffn_down[0, 0] = 0.0
    model.weights.output_norm[0] = np.inf
    with pytest.raises(ModelError, match="output head"):
        model.forward([1, 2, 3], cache)


def test_bad_token_ids_and_spans(tiny_gguf: Any) -> None:
    model = Model.load(tiny_gguf("llama"))
    cache = model.new_cache(16)
    with pytest.raises(ModelError, match="64"):
        model.forward([1, 64], cache)
    with pytest.raises(ModelError, match="-1"):
        model.forward([-1], cache)
    with pytest.raises(ModelError, match="at least one token"):
        model.forward([], cache)
    with pytest.raises(ModelError, match="positions"):
        model.forward([1, 2], cache, positions=[0])
    with pytest.raises(ContextOverflow):
        model.forward([1], cache, positions=[128])
    assert cache.length == 0


# -- layers against their formulas --------------------------------------------------------------------


def test_rope_pairs_norm_vs_neox() -> None:
    """NORM rotates (x[2i], x[2i+1]); NEOX rotates (x[i], x[i + d/2]); dims past rope_dim pass."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 2, 10)).astype(np.float32)
    pos = np.array([0, 1, 7], dtype=np.int64)
    for neox in (False, True):
        got = layers.rope(x, pos, rope_dim=8, base=100.0, freq_scale=0.5, rope_type="neox" if neox else "norm")
        for t in range(3):
            for h in range(2):
                want = _rotate(x[t, h, :8].astype(np.float64), int(pos[t]), 100.0, 0.5, neox)
                bound = rope_rounding_bound(x[t, h, :8], 8, "neox" if neox else "norm")
                assert_within(got[t, h, :8], want, bound, "rope")
                assert np.array_equal(got[t, h, 8:], x[t, h, 8:])


def test_activation_and_norm_formulas() -> None:
    x = np.linspace(-12, 12, 97, dtype=np.float32)
    x64 = x.astype(np.float64)
    assert_within(layers.silu(x), x64 / (1 + np.exp(-x64)), silu_rounding_bound(x), "silu")
    erf_gelu = 0.5 * x64 * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x64]))
    # Not a rounding tolerance: the tanh form's approximation error, max |tanh form - erf form| =
    # 4.73e-4 over the reals (at x = 2.70; computed in float64 on a 1e-5 grid), plus its rounding.
    assert_within(layers.gelu_tanh(x), erf_gelu, 4.8e-4 + gelu_tanh_rounding_bound(x), "gelu vs erf")
    # the float64 restatement uses the exact constants; layers.py's float32 ones differ by u relative
    gelu64 = _gelu_tanh(x64)
    constants = 2.0 * 2.0**-24 * np.abs(gelu64) + 2.0**-24 * np.abs(x64)  # sqrt(2/pi), 0.044715 rounded
    assert_within(layers.gelu_tanh(x), gelu64, gelu_tanh_rounding_bound(x) + constants, "gelu_tanh")
    w = np.arange(1, 98, dtype=np.float32) / 50
    y = _rms(x, w, float(np.float32(1e-6)))
    assert_within(layers.rms_norm(x, w, 1e-6), y, rms_norm_rounding_bound(y, x.size), "rms_norm")


def test_attention_mask_rule() -> None:
    q = np.array([3, 4, 5], dtype=np.int64)
    k = np.arange(6, dtype=np.int64)
    full = layers.attention_mask(q, k, 0)
    window = layers.attention_mask(q, k, 3)
    for i, qp in enumerate(q):
        for j, kp in enumerate(k):
            assert full[i, j] == (kp <= qp)
            assert window[i, j] == (kp <= qp and qp - kp < 3)  # llama.cpp: masked iff qp - kp >= n_swa


# -- the two real configs, against what llama.cpp derives from their metadata ------------------------


@pytest.mark.model
def test_real_configs(smollm2_path: Path, gemma3_path: Path) -> None:
    with GGUFFile.open(smollm2_path) as f:
        s = Config.from_gguf(f)
    assert (s.arch, s.n_layer, s.n_embd, s.n_head, s.n_head_kv, s.head_dim, s.n_ff) == (
        "llama",
        30,
        576,
        9,
        3,
        64,
        1536,
    )
    assert (s.rope_type, s.rope_base, s.rope_dim, s.context_length, s.n_vocab) == ("norm", 100000.0, 64, 8192, 49152)
    assert not any(s.sliding_layers) and s.final_softcap is None and s.embed_scale == 1.0
    assert s.attn_scale == pytest.approx(1 / 8)

    with GGUFFile.open(gemma3_path) as f:
        g = Config.from_gguf(f)
    assert (g.arch, g.n_layer, g.n_embd, g.n_head, g.n_head_kv, g.head_dim, g.n_ff) == (
        "gemma3",
        18,
        640,
        4,
        1,
        256,
        2048,
    )
    assert (g.rope_type, g.rope_base, g.rope_base_local, g.rope_dim) == ("neox", 1e6, 10000.0, 256)
    assert g.sliding_window == 512
    assert g.sliding_layers == tuple(il % 6 < 5 for il in range(18))  # globals: 5, 11, 17
    assert g.embed_scale == pytest.approx(math.sqrt(640))
    assert g.attn_scale == pytest.approx(1 / 16)
    assert g.final_softcap is None and g.qk_norm and g.post_norms
    assert g.n_vocab == 262144 and g.context_length == 32768
