"""Float32 tolerances derived from an error model, for tests that compare two float32 evaluations.

The situation. A batched pass and single rows, a deferred catch-up and a full forward, a cached
decode and a fresh one: each is a float32 evaluation of the same exact function f, and each rounds
differently (BLAS picks a kernel and a summation order per shape and per CPU: AVX2 vs AVX-512), so
they rarely agree bit for bit, and a tolerance read off one machine fails on another. Each lies
within its own rounding error of f, so ``|a - b| <= |a - f| + |f - b|``; the tolerance is a bound on
those two errors, derived here from the float32 unit roundoff u = 2^-24, the reduction length of
every sum, the magnitudes of the operands, and the depth of the computation.

Why not the worst-case bound. Higham's deterministic bound (every dot product of length n off by
at most gamma_n |a|.|b|, gamma_n = n u / (1 - n u)) holds in any summation order, but pushed through
a network it assumes every error aligned with the next matmul's weights: |W| e instead of W e. That
costs a factor ~sqrt(n) per matmul and compounds per layer; on the suite's 5-layer test model it
reaches O(1) after two layers (measured when this module was written), which would not catch the
O(1) bugs the tests exist for.

The model used: probabilistic rounding (Higham & Mary, "A new approach to probabilistic rounding
error analysis", SIAM J. Sci. Comput. 41(5), 2019). Every elementary operation returns its exact
result times (1 + d) with the d independent, mean zero, |d| <= u; a dot product of length n is then
off by sum_k s_k d_k, where the partial sums satisfy |s_k| <= |a|.|b|, so its standard deviation is
at most ``u sqrt(n) |a|.|b|`` in ANY summation order (recursive, blocked, pairwise, FMA) -- the
sqrt(n) that the summation order cannot change is what makes the bound machine-independent.

How depth is handled: Monte Carlo arithmetic (Parker 1997; the Verificarlo tool uses it for exactly
this question, reproducibility across machines). :func:`forward_spread` runs the reference forward in
float64 (its own rounding, ~1e-16, is negligible), once exactly (f) and ``SAMPLES`` times with
every operation's result perturbed by Gaussian noise of the standard deviation above (a dot
product: u sqrt(n) |a|.|b|; an elementwise op: u |result|; exp/tanh: LIBM_ULPS u |result|). The
perturbations propagate through the real network, with its real nonlinearities and correlations,
and ``sigma`` = the RMS over the samples of (noisy - exact) estimates each element's error spread.

The tolerance: ``|a - b| <= 2 lambda(R) sigma`` elementwise (2: one spread per path; their
errors may be correlated, and sd(a - b) <= sigma_a + sigma_b holds whatever the correlation), with
``lambda(R) = Z / sqrt(chi2_R^-1(P_SIGMA) / R)``: Z = 6 standard deviations (the error is a sum of
many independent bounded roundings: Gaussian tail 2e-9 per element; Hoeffding's inequality, which
needs no Gaussian shape, gives 2 exp(-Z^2 / 2) = 3e-8), divided by the factor by which R samples may
underestimate sigma except with probability P_SIGMA = 1e-9 (R = 32: lambda = 16.5; R = 16: 31). The model is itself conservative (each
rounding charged its maximum u, each partial sum the full |a|.|b|): on this suite's models the real
float32-vs-exact differences stay below ~0.6 sigma. Measured margin, as a check of the model and
not an input to it: the early-exit KV test passes when every projection of one path is computed by
sequential float32 sums or float64 accumulation, or perturbed by 64 random ulps, and fails at 256.
What this can detect: any deviation above the tolerance, which on the tiny test models (~1e-4) is
orders of magnitude below an O(1) bug (tests assert that separately). What it cannot: a deviation
below the tolerance, which grows with depth: on the 30-layer real models it is ~0.02-0.07 on logits
of spread ~8 (a norm eps 10x off or an attention scale 1% off still fail it; a RoPE base 1% off,
0.007, does not), so fine-grained checks belong on the tiny models. Cost: ~0.1-0.2 s for a tiny
model, seconds for a real one (``head=False`` / ``head_rows`` / fewer ``samples`` cut it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

import numpy as np
import numpy.typing as npt

from verispec.reference import layers
from verispec.reference.config import ACT_GELU_TANH, ACT_SILU, ROPE_NEOX, ROPE_NORM
from verispec.reference.model import Model

F64 = npt.NDArray[np.float64]

U = 2.0**-24  # float32 unit roundoff (round to nearest)
LIBM_ULPS = 4  # float32 exp/tanh (NumPy's SIMD kernels, glibc) are accurate to ~1-3 ulp
SAMPLES = 32  # Monte Carlo draws of the rounding errors (the default)
Z = 6.0  # standard deviations allowed per element (two-sided Gaussian tail 2e-9)
P_SIGMA = 1e-9  # chance that the R-sample sigma underestimates beyond the chi2 allowance
SEED = 20261130  # fixed: the tolerance is a deterministic function of (model, tokens)


def gamma(n: int) -> float:
    """Higham's gamma_n = n u / (1 - n u): the worst-case relative error of an n-term float32 sum
    of terms of one sign (used for single ops below, where the worst case is tight enough)."""
    if n * U >= 1.0:
        raise ValueError(f"reduction length {n} is too long for a float32 error bound")
    return n * U / (1.0 - n * U)


class Rounding:
    """Draws the rounding perturbations of one Monte Carlo forward.

    Values carry a leading sample axis of size ``1 + SAMPLES``: row 0 is the exact run (never
    perturbed), rows 1.. are the perturbed ones.
    """

    def __init__(self, samples: int = SAMPLES, seed: int = SEED) -> None:
        self.rng = np.random.default_rng(seed)
        self.on = np.concatenate([[0.0], np.ones(samples)])  # [1 + R]

    def noise(self, like: F64) -> F64:
        """Standard normal noise shaped like ``like`` ``[1 + R, ...]``, zero in the exact row."""
        z = self.rng.standard_normal(like.shape, dtype=np.float32)
        return np.asarray(z * self.on.reshape((-1,) + (1,) * (like.ndim - 1)), dtype=np.float64)

    def op(self, y: F64, ulps: float = 1.0) -> F64:
        """An elementwise op's result rounded: y (1 + ulps u z)."""
        return np.asarray(y * (1.0 + ulps * U * self.noise(y)), dtype=np.float64)

    def dot(self, y: F64, magnitude: F64, n: int) -> F64:
        """A length-n reduction y whose terms have |a|.|b| = magnitude: y + u sqrt(n) magnitude z."""
        return np.asarray(y + U * np.sqrt(n) * magnitude * self.noise(y), dtype=np.float64)


def _linear(r: Rounding, x: F64, weight: npt.NDArray[np.floating], bias: npt.NDArray[np.floating] | None = None) -> F64:
    """``x @ W.T (+ b)``, W ``[out, in]``: a length-in dot product per output, then the bias add."""
    w = np.asarray(weight, dtype=np.float64)
    y = r.dot(x @ w.T, np.abs(x[:1]) @ np.abs(w).T, w.shape[1])  # magnitudes: the exact row suffices
    return y if bias is None else r.op(y + np.asarray(bias, dtype=np.float64))


def _rms_norm(r: Rounding, x: F64, weight: npt.NDArray[np.floating], eps: float) -> F64:
    """layers.rms_norm: n squares summed (terms >= 0: the sum is its own |a|.|b|), / n, + eps,
    sqrt, divide, times w -- each rounded."""
    n = x.shape[-1]
    squares = r.op(x * x)
    mean_square = r.op(r.dot(np.sum(squares, axis=-1, keepdims=True), np.sum(squares, axis=-1, keepdims=True), n) / n)
    s = r.op(np.sqrt(r.op(mean_square + float(np.float32(eps)))))
    return r.op(r.op(x / s) * np.asarray(weight, dtype=np.float64))


def _rope_pairs(rope_dim: int, rope_type: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The indices of the two components RoPE rotates together: adjacent (NORM) or half apart (NEOX)."""
    half = rope_dim // 2
    if rope_type == ROPE_NORM:
        return np.arange(0, rope_dim, 2), np.arange(1, rope_dim, 2)
    if rope_type == ROPE_NEOX:
        return np.arange(half), np.arange(half, rope_dim)
    raise ValueError(f"unknown rope type {rope_type!r}")


def _rope(
    r: Rounding, x: F64, positions: npt.NDArray[np.int64], rope_type: str, rope_dim: int, **rope_args: object
) -> F64:
    """layers.rope (run in float64 on ``[1 + R, T, H, d]``), then per rotated component
    a c - b s: cos and sin rounded to float32 (u each: another path, e.g. another position with
    the same distances, another library, rounds them differently), two products and a difference:
    u (|a c| + |b s| + |a c| + |b s| + |a'|) <= u sqrt(5) sqrt(a^2 + b^2) in spread, charged as that."""
    y = np.asarray(layers.rope(x, positions, rope_dim=rope_dim, rope_type=rope_type, **rope_args), dtype=np.float64)  # type: ignore[arg-type]
    first, second = _rope_pairs(rope_dim, rope_type)
    pair_norm = np.sqrt(x[..., first] ** 2 + x[..., second] ** 2)
    y[..., first] += np.sqrt(5.0) * U * pair_norm * r.noise(pair_norm)
    y[..., second] += np.sqrt(5.0) * U * pair_norm * r.noise(pair_norm)
    return y


def _attention(
    r: Rounding, q: F64, k: F64, v: F64, mask: npt.NDArray[np.bool_], scale: float, longest_span: int
) -> F64:
    """layers.attention on ``[1 + R, ...]``: scores (length-d dots, times the scale), the max
    shift, exp (LIBM_ULPS), the sum over the keys (terms >= 0) and division, then p . v (a sum over
    the keys). Reductions over keys charge the longest span any path may run (every key of the
    sequence), so one tolerance holds for a batched pass and for single rows alike.
    q ``[1+R, T, H, d]``, k, v ``[1+R, n_kv, S, d]`` -> ``[1+R, T, H * d]``."""
    n_samples, n_tokens, n_head, d = q.shape
    n_kv = k.shape[1]
    group = n_head // n_kv
    qg = q.transpose(0, 2, 1, 3).reshape(n_samples, n_kv, group, n_tokens, d)
    kt = k[:, :, None].transpose(0, 1, 2, 4, 3)  # [1+R, n_kv, 1, d, S]
    scores = r.dot(qg @ kt, np.abs(qg[:1]) @ np.abs(kt[:1]), d)
    scores = r.op(scores * float(np.float32(scale)))
    scores = np.where(mask, scores, -np.inf)
    shifted = r.op(scores - np.max(scores, axis=-1, keepdims=True))
    weights = r.op(np.exp(shifted), LIBM_ULPS)
    total = np.sum(weights, axis=-1, keepdims=True)
    weights = r.op(weights / r.dot(total, total, longest_span))
    vv = v[:, :, None]  # [1+R, n_kv, 1, S, d]
    out = r.dot(weights @ vv, weights[:1] @ np.abs(vv[:1]), longest_span)
    return out.reshape(n_samples, n_head, n_tokens, d).transpose(0, 2, 1, 3).reshape(n_samples, n_tokens, -1)


def _activation(r: Rounding, x: F64, activation: str) -> F64:
    """layers.silu / layers.gelu_tanh: h x (1 + tanh(t)) with h = 1/2 exact; t (silu: x / 2, exact;
    gelu: c x (1 + a x^2), five rounded ops), tanh (LIBM_ULPS), 1 + tanh, two products."""
    if activation == ACT_SILU:
        t = 0.5 * x
    elif activation == ACT_GELU_TANH:
        c, a = float(np.float32(np.sqrt(2.0 / np.pi))), float(np.float32(0.044715))
        t = r.op(c * x * (1.0 + a * x * x), np.sqrt(5.0))
    else:
        raise ValueError(f"unknown activation {activation!r}")
    return r.op(r.op(0.5 * x) * r.op(1.0 + r.op(np.tanh(t), LIBM_ULPS)))


@cache
def tolerance_factor(samples: int) -> float:
    """lambda(R) = Z / sqrt(chi2_R^-1(P_SIGMA) / R): Z standard deviations, widened by how far R
    samples may underestimate sigma (module docstring)."""
    from scipy.stats import chi2

    return Z / float(np.sqrt(chi2.ppf(P_SIGMA, samples) / samples))


@dataclass(frozen=True)
class Spread:
    """One tensor of a forward: its exact value (float64) and its float32 rounding spread sigma,
    estimated from ``samples`` Monte Carlo runs."""

    value: F64
    sigma: F64
    samples: int

    @property
    def tolerance(self) -> F64:
        """The elementwise tolerance for comparing two float32 evaluations: 2 lambda(R) sigma."""
        return np.asarray(2.0 * tolerance_factor(self.samples) * self.sigma, dtype=np.float64)


@dataclass(frozen=True)
class ForwardSpread:
    """A full forward over T tokens, as reference.model.Model.forward lays its tensors out."""

    hidden: Spread  # [n_layer + 1, T, n_embd]: [0] embeddings, [l + 1] after layer l
    k: Spread  # [n_layer, n_kv, T, head_dim]  the KV cache layout (after RoPE)
    v: Spread  # [n_layer, n_kv, T, head_dim]
    logits: Spread | None  # [T, V]  (None when asked without the head)


def forward_spread(
    model: Model,
    tokens: tuple[int, ...],
    positions: tuple[int, ...] | None = None,
    *,
    head: bool = True,
    samples: int = SAMPLES,
    head_rows: int | None = None,
) -> ForwardSpread:
    """The exact values and float32 rounding spreads of ``model.forward(tokens)`` (any batching).
    ``head=False`` skips the logits (the [V, E] head in float64 is the costly part of a real model),
    ``head_rows=m`` computes them for the last m rows only (``logits`` is then ``[m, V]``); fewer
    ``samples`` cost less and widen the tolerance (``tolerance_factor``)."""
    cfg, w = model.config, model.weights
    r = Rounding(samples)
    pos = np.asarray(range(len(tokens)) if positions is None else positions, dtype=np.int64)
    x = np.broadcast_to(
        np.asarray(w.token_embd[np.asarray(tokens)], dtype=np.float64), (len(r.on), len(tokens), cfg.n_embd)
    )
    if cfg.embed_scale != 1.0:
        x = r.op(x * float(np.float32(cfg.embed_scale)))
    hidden, ks, vs = [x], [], []
    for layer in range(cfg.n_layer):
        x, k, v = _layer(r, model, layer, x, pos)
        hidden += [x]
        ks += [k]
        vs += [v]

    def spread(runs: F64) -> Spread:  # runs [1 + R, ...]
        return Spread(runs[0], np.sqrt(np.mean((runs[1:] - runs[0]) ** 2, axis=0)), samples)

    logits = None
    if head:
        last = x if head_rows is None else x[:, x.shape[1] - head_rows :]
        normed = _rms_norm(r, last, w.output_norm, cfg.norm_eps)
        # the head in vocabulary chunks: a real model's [V, E] in float64 would take gigabytes
        parts = [spread(_logits(r, model, normed, rows)) for rows in _chunks(cfg.n_vocab, HEAD_CHUNK)]
        logits = Spread(
            np.concatenate([p.value for p in parts], axis=-1),
            np.concatenate([p.sigma for p in parts], axis=-1),
            samples,
        )
    return ForwardSpread(
        hidden=spread(np.stack(hidden, axis=1)),
        k=spread(np.stack(ks, axis=1)),
        v=spread(np.stack(vs, axis=1)),
        logits=logits,
    )


HEAD_CHUNK = 8192  # vocabulary rows of the head per float64 matmul


def _chunks(n: int, size: int) -> list[slice]:
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def _logits(r: Rounding, model: Model, normed: F64, rows: slice) -> F64:
    """The head's matmul and softcap for vocabulary ``rows`` -> ``[1 + R, T, len(rows)]``."""
    logits = _linear(r, normed, model.weights.output[rows])
    cap = model.config.final_softcap
    if cap is not None:
        c = float(np.float32(cap))
        logits = r.op(c * r.op(np.tanh(r.op(logits / c)), LIBM_ULPS))
    return logits


def truncated(model: Model, n_layer: int) -> Model:
    """The model's first ``n_layer`` layers and its head: ``truncated(m, k).forward`` is
    ``m.head(m.forward_layers(m.embed(.), ..., 0, k - 1, ...))``, the function an exit at depth k runs."""
    cfg, w = model.config, model.weights
    config = replace(cfg, n_layer=n_layer, sliding_layers=cfg.sliding_layers[:n_layer])
    return Model(config, replace(w, layers=w.layers[:n_layer]))


def _layer(r: Rounding, model: Model, layer: int, x: F64, pos: npt.NDArray[np.int64]) -> tuple[F64, F64, F64]:
    """verispec.reference.model.Model._layer on ``[1 + R, T, E]`` -> (output, k, v ``[1 + R, n_kv, T, d]``
    zero-padded to the cache's head count and head dim)."""
    cfg, w = model.config, model.weights.layers[layer]
    n_samples, n = x.shape[0], x.shape[1]
    d, n_kv = cfg.layer_head_dim(layer), cfg.layer_n_head_kv(layer)
    h = _rms_norm(r, x, w.attn_norm, cfg.norm_eps)
    q = _linear(r, h, w.wq, w.bq).reshape(n_samples, n, cfg.n_head, d)
    k = _linear(r, h, w.wk, w.bk).reshape(n_samples, n, n_kv, d)
    v = _linear(r, h, w.wv, w.bv).reshape(n_samples, n, n_kv, d)
    if w.q_norm is not None and w.k_norm is not None:
        q, k = _rms_norm(r, q, w.q_norm, cfg.norm_eps), _rms_norm(r, k, w.k_norm, cfg.norm_eps)
    if cfg.value_norm:
        v = _rms_norm(r, v, np.ones(d), cfg.norm_eps)
    factors = model.weights.rope_freqs
    if cfg.rope_freqs_global_only and cfg.is_sliding(layer):
        factors = None
    rope = dict(
        rope_dim=cfg.layer_rope_dim(layer),
        base=cfg.layer_rope_base(layer),
        freq_scale=cfg.layer_rope_freq_scale(layer),
        freq_factors=factors,
    )
    q, k = _rope(r, q, pos, cfg.rope_type, **rope), _rope(r, k, pos, cfg.rope_type, **rope)  # type: ignore[arg-type]
    k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # [1+R, n_kv, T, d]
    window = cfg.sliding_window if cfg.is_sliding(layer) else 0
    mask = layers.attention_mask(pos, pos, window)
    a = _linear(r, _attention(r, q, k, v, mask, cfg.attn_scale, n), w.wo, w.bo)
    if w.post_attn_norm is not None:
        a = _rms_norm(r, a, w.post_attn_norm, cfg.norm_eps)
    x = r.op(x + a)
    h = _rms_norm(r, x, w.ffn_norm, cfg.norm_eps)
    gated = r.op(_activation(r, _linear(r, h, w.ffn_gate), cfg.ffn_activation) * _linear(r, h, w.ffn_up))
    f = _linear(r, gated, w.ffn_down)
    if w.post_ffn_norm is not None:
        f = _rms_norm(r, f, w.post_ffn_norm, cfg.norm_eps)
    out = r.op(x + f)
    if w.out_scale is not None:
        out = r.op(out * float(w.out_scale[0]))
    pad = ((0, 0), (0, cfg.n_head_kv - n_kv), (0, 0), (0, cfg.head_dim - d))  # the cache's zero padding
    return out, np.pad(k, pad), np.pad(v, pad)


def assert_within(got: npt.ArrayLike, want: npt.ArrayLike, tolerance: npt.ArrayLike, what: str = "values") -> None:
    """|got - want| <= tolerance elementwise; the message names the worst element."""
    g = np.asarray(got, dtype=np.float64)
    wv = np.asarray(want, dtype=np.float64)
    t = np.broadcast_to(np.asarray(tolerance, dtype=np.float64), g.shape)
    diff = np.abs(g - wv)
    bad = ~(diff <= t)
    if bad.any():
        i = np.unravel_index(int(np.argmax(np.where(bad, diff / np.maximum(t, 1e-300), -np.inf))), g.shape)
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {g.size} elements outside the derived float32 tolerance; "
            f"worst at {tuple(int(j) for j in i)}: {g[i]:.9g} vs {wv[i]:.9g}, |diff| {diff[i]:.3g} > {t[i]:.3g}"
        )


# -- worst-case bounds of single layers.py functions on exact float32 inputs ---------------------------
# One op deep, Higham's deterministic bound is tight enough: each rounding at most u relative, a
# library exp/tanh at most LIBM_ULPS ulp; products of two rounding errors (~u^2) are dropped.


def silu_rounding_bound(x: npt.ArrayLike) -> F64:
    """|layers.silu(x) - silu(x)|: x/2 exact, tanh LIBM_ULPS ulp, 1 + t one rounding, the product
    one: |x|/2 (LIBM_ULPS u |t| + u |1 + t|) + u |y|."""
    xv = np.asarray(x, dtype=np.float64)
    t = np.tanh(0.5 * xv)
    y = 0.5 * xv * (1.0 + t)
    return np.asarray(
        0.5 * np.abs(xv) * (LIBM_ULPS * U * np.abs(t) + U * np.abs(1.0 + t)) + U * np.abs(y), dtype=np.float64
    )


def gelu_tanh_rounding_bound(x: npt.ArrayLike) -> F64:
    """|layers.gelu_tanh(x) - gelu_tanh(x)| (same float32 constants): the inner argument t takes
    five roundings (relative 5u, all factors of one sign), which tanh turns into (1 - t'^2) 5u |t|;
    then as silu: |x|/2 (LIBM_ULPS u |t'| + 5u |t| (1 - t'^2) + u |1 + t'|) + 2u |y| (two products)."""
    xv = np.asarray(x, dtype=np.float64)
    c, a = float(np.float32(np.sqrt(2.0 / np.pi))), float(np.float32(0.044715))
    inner = c * xv * (1.0 + a * xv * xv)
    t = np.tanh(inner)
    y = 0.5 * xv * (1.0 + t)
    tanh_err = LIBM_ULPS * U * np.abs(t) + 5.0 * U * np.abs(inner) * (1.0 - t * t)
    return np.asarray(0.5 * np.abs(xv) * (tanh_err + U * np.abs(1.0 + t)) + 2.0 * U * np.abs(y), dtype=np.float64)


def rms_norm_rounding_bound(y: npt.ArrayLike, n: int) -> F64:
    """|layers.rms_norm(x, w, eps) - exact| for exact float32 x, w over n terms: the mean of squares
    is n squares, a sum and a division by n, all terms >= 0 (relative gamma(n + 1)), plus eps (u):
    gamma(n + 2) on s^2; sqrt halves that and adds u; the division and the weight add 2u. Relative
    to |y|: gamma(n + 2) / 2 + 3u."""
    return np.asarray(np.abs(np.asarray(y, dtype=np.float64)) * (gamma(n + 2) / 2.0 + 3.0 * U), dtype=np.float64)


def rope_rounding_bound(x: npt.ArrayLike, rope_dim: int, rope_type: str) -> F64:
    """|layers.rope(x) - exact rotation| for exact float32 x ``[..., d]``: per output a c - b s with
    c, s rounded from float64 (u each), two products (u each) and a difference (u):
    u (2 |a c| + 2 |b s| + |a'|) <= 5 u sqrt(a^2 + b^2) (Cauchy-Schwarz with c^2 + s^2 = 1). The
    float64 angle (relative ~1e-16) is far below. Dims past rope_dim pass exactly (bound 0)."""
    xv = np.asarray(x, dtype=np.float64)
    first, second = _rope_pairs(rope_dim, rope_type)
    pair = 5.0 * U * np.sqrt(xv[..., first] ** 2 + xv[..., second] ** 2)
    bound = np.zeros_like(xv)
    bound[..., first], bound[..., second] = pair, pair
    return bound
