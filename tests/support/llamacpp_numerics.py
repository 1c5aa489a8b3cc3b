"""llama.cpp's CPU numerics, emulated for the llama and gemma3 forwards (a test oracle aid only).

Our reference forward (reference/model.py) computes the exact float32 function of the dequantized
weights. llama.cpp (ggml-cpu, as used by llama-cpp-python for tests/data/golden) rounds on the way:

- every quantized matmul first quantizes its f32 input to the weight's ``vec_dot_type``
  (Q8_0 / Q8_1 blocks of 32, Q8_K blocks of 256) and takes integer dot products;
- K and V are stored in an F16 cache; the query is converted to F16 for ``K.Q``
  (``ggml_vec_dot_f16``, f32 accumulators);
- without flash attention: softmax in f32, then the weights are converted to F16 for ``V.kq``;
  with flash attention (ggml_compute_forward_flash_attn_ext_f16_one_chunk): online softmax whose
  V accumulator ``VKQ16`` is F16, rounded after every key (``ggml_vec_scale_f16``,
  ``ggml_vec_mad_f16``);
- RMSNorm sums in double; RoPE angles come from ``theta *= powf(base, -2/n_dims)`` in float;
- GELU (gemma3's GeGLU) reads an F16 table indexed by the F16 input.

:func:`emulated_forward` runs a whole span (a prompt, or one decode token) through a
:class:`reference.model.Model` with those roundings, switchable one by one with :class:`Numerics`,
reading the model's dequantized weights and each weight's ggml type from its GGUF file.

What it reaches (measured against tests/data/golden, OPENBLAS_NUM_THREADS=1): the first position
to NMSE 1e-4 (SmolLM2) and 1.3e-7 (Gemma 3); Gemma 3's second position of the first golden prompt
to 6e-8 without flash attention (4.5e-3 with it: the golden data was made without FA). Later
positions only reach 1e-3 .. 3e-2, because a forward with 8-bit activations is chaotic: scaling
the embeddings by (1 + 2^-23) moves its later-position logits by NMSE 1e-3 .. 1.6e-2, while the float32
forward moves by ~1e-11 (tests/test_golden_emulated.py: max 1.6e-2 / 8.1e-3 vs 4e-11). Without ggml's exact summation orders
(AVX2 lanes, its SIMD expf) no emulation can get closer than that floor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from verispec.reference import layers
from verispec.reference.config import ACT_GELU_TANH, ROPE_NEOX, ROPE_NORM
from verispec.reference.gguf import GGUFFile
from verispec.reference.model import Model

F32 = npt.NDArray[np.float32]

# ggml types whose vec_dot_type is Q8_0 / Q8_1 / Q8_K (ggml-cpu type_traits_cpu)
_Q8_0_USERS = {2, 6, 8}  # Q4_0, Q5_0, Q8_0
_Q8_1_USERS = {3: 20, 7: 24}  # Q4_1, Q5_1 -> bytes per block (d f16, m f16, ...)
_Q8_K_USERS = {10, 11, 12, 13, 14}  # Q2_K .. Q6_K


@dataclass(frozen=True)
class Numerics:
    """Which of llama.cpp's roundings to emulate (all on: the closest emulation)."""

    quantize_activations: bool = True  # 8-bit inputs to quantized matmuls
    f16_kv: bool = True  # K and V stored as F16
    f16_q: bool = True  # Q converted to F16 for K.Q
    flash_attn: bool = False  # FA kernel (F16 V accumulator) vs softmax + F16 weights
    f16_gelu: bool = True  # GELU from the F16 table
    ggml_norm_rope: bool = True  # RMSNorm in double, RoPE angles by iterated float product


def f16(x: Any) -> F32:
    """Round to float16 and back (ggml_fp32_to_fp16, round to nearest even)."""
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


# -- quantized matmul inputs ----------------------------------------------------------------------


def q8_blocks(x: F32) -> tuple[F32, F32, F32]:
    """quantize_row_q8_0/q8_1: blocks of 32, d = amax/127, q = round(x * 127/amax).

    Returns (q [n_blocks, 32], d [n_blocks, 1] in f32, q * f16(d) shaped like x)."""
    xb = x.reshape(-1, 32).astype(np.float32)
    amax = np.asarray(np.abs(xb).max(1, keepdims=True), np.float32)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        inverse = np.where(amax > 0, np.float32(127) / amax, 0).astype(np.float32)
    q = np.round(xb * inverse).astype(np.float32)  # round half to even, as _mm256_round_ps
    return q, d, (q * f16(d)).reshape(x.shape).astype(np.float32)


def q8_k(x: F32) -> F32:
    """quantize_row_q8_K: blocks of 256, iscale = -127/max (max = the value of largest |x|)."""
    xb = x.reshape(-1, 256).astype(np.float32)
    top = xb[np.arange(len(xb)), np.abs(xb).argmax(1)][:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = np.where(top != 0, np.float32(-127) / top, 0).astype(np.float32)
        d = np.where(iscale != 0, np.float32(1) / iscale, 0).astype(np.float32)
    q = np.minimum(127, np.round(iscale * xb))
    return np.asarray((q * d).reshape(x.shape), np.float32)


@dataclass
class QuantizedLinear:
    """A weight's dequantized matrix and what ggml needs to emulate its matmul."""

    weight: F32  # [out, in]
    ggml_type: int
    mins: F32 | None = None  # [out, in/32] the Q4_1/Q5_1 block mins (for Q8_1's s term)

    def __call__(self, x: F32, numerics: Numerics) -> F32:
        """``x @ W.T`` as ggml-cpu computes it for this weight type: x ``[T, in]`` -> ``[T, out]``."""
        if not numerics.quantize_activations:
            return layers.linear(x, self.weight)
        if self.ggml_type in _Q8_K_USERS:
            return layers.linear(q8_k(x), self.weight)
        if self.ggml_type in _Q8_0_USERS or self.ggml_type in _Q8_1_USERS:
            q, d, xq = q8_blocks(x)
            y = layers.linear(xq, self.weight)
            if self.mins is not None:  # the min term uses s = f16(d * sum q), not f16(d) * sum q
                sum_q = q.sum(1).reshape(x.shape[0], -1)
                dd = d.reshape(x.shape[0], -1)
                y = y + (f16(dd * sum_q) - f16(dd) * sum_q) @ self.mins.T
            return np.asarray(y, np.float32)
        return layers.linear(x, self.weight)


@dataclass
class EmulatedModel:
    """A reference Model plus the ggml type of every matmul weight (read from its GGUF file)."""

    model: Model
    linears: dict[str, QuantizedLinear] = field(default_factory=dict)

    @classmethod
    def load(cls, model: Model, path: Path) -> "EmulatedModel":
        """Pair ``model`` (loaded from ``path``) with its weights' ggml types and Q4_1/Q5_1 mins."""
        emu = cls(model)
        with GGUFFile.open(path) as f:
            head = "output.weight" if "output.weight" in f.tensors else "token_embd.weight"
            named: dict[str, tuple[str, F32]] = {"output": (head, model.weights.output)}
            for il, lw in enumerate(model.weights.layers):
                for fld, tensor in [
                    ("wq", "attn_q"),
                    ("wk", "attn_k"),
                    ("wv", "attn_v"),
                    ("wo", "attn_output"),
                    ("ffn_gate", "ffn_gate"),
                    ("ffn_up", "ffn_up"),
                    ("ffn_down", "ffn_down"),
                ]:
                    named[f"{il}.{fld}"] = (f"blk.{il}.{tensor}.weight", getattr(lw, fld))
            for key, (tensor, array) in named.items():
                kind = f.tensors[tensor].ggml_type
                mins = None
                if kind in _Q8_1_USERS:
                    raw = np.asarray(f.raw(tensor)).reshape(-1, _Q8_1_USERS[kind])
                    m = raw[:, 2:4].copy().view(np.float16).astype(np.float32)
                    mins = m.reshape(array.shape[0], array.shape[1] // 32)
                emu.linears[key] = QuantizedLinear(array, kind, mins)
        return emu


# -- the elementwise blocks ------------------------------------------------------------------------


def rms_norm(x: F32, weight: F32, eps: float, numerics: Numerics) -> F32:
    """ggml_compute_forward_rms_norm_f32 (sum of squares in double, scale = 1.0f/sqrtf) then mul."""
    if not numerics.ggml_norm_rope:
        return layers.rms_norm(x, weight, eps)
    mean = np.sum(np.square(x.astype(np.float64)), axis=-1, keepdims=True) / x.shape[-1]
    scale = (np.float32(1.0) / np.sqrt(np.asarray(mean, np.float32) + np.float32(eps))).astype(np.float32)
    return np.asarray((x * scale).astype(np.float32) * weight, np.float32)


def rope(
    x: F32,
    positions: npt.NDArray[np.int64],
    *,
    rope_dim: int,
    base: float,
    freq_scale: float,
    rope_type: str,
    numerics: Numerics,
) -> F32:
    """ggml_rope_ext (no YaRN): theta_i = p * theta_scale^i by repeated float products."""
    if not numerics.ggml_norm_rope:
        return layers.rope(x, positions, rope_dim=rope_dim, base=base, freq_scale=freq_scale, rope_type=rope_type)
    half = rope_dim // 2
    theta_scale = np.float32(math.pow(base, -2.0 / rope_dim))  # powf
    theta = np.empty((len(positions), half), np.float32)  # [T, half]
    t = positions.astype(np.float32)
    for i in range(half):
        theta[:, i] = np.float32(freq_scale) * t
        t = (t * theta_scale).astype(np.float32)
    cos = np.cos(theta).astype(np.float32)[:, None, :]
    sin = np.sin(theta).astype(np.float32)[:, None, :]
    out = x.copy()
    if rope_type == ROPE_NORM:
        x0, x1 = x[..., 0:rope_dim:2], x[..., 1:rope_dim:2]
        out[..., 0:rope_dim:2] = x0 * cos - x1 * sin
        out[..., 1:rope_dim:2] = x0 * sin + x1 * cos
    elif rope_type == ROPE_NEOX:
        x0, x1 = x[..., :half], x[..., half:rope_dim]
        out[..., :half] = x0 * cos - x1 * sin
        out[..., half:rope_dim] = x0 * sin + x1 * cos
    else:
        raise ValueError(rope_type)
    return out


def gelu(x: F32, numerics: Numerics) -> F32:
    """ggml_vec_gelu_f32 with GGML_GELU_FP16: 0 below -10, x above 10, else the F16 table."""
    if not numerics.f16_gelu:
        return layers.gelu_tanh(x)
    table = f16(layers.gelu_tanh(f16(x)))
    return np.where(x <= -10, 0, np.where(x >= 10, x, table)).astype(np.float32)


def silu(x: F32) -> F32:
    """ggml_silu_f32: x / (1 + expf(-x))."""
    with np.errstate(over="ignore"):
        return np.asarray(x / (np.float32(1) + np.exp(-x)), np.float32)


# -- attention -------------------------------------------------------------------------------------


def attention(q: F32, k: F32, v: F32, mask: npt.NDArray[np.bool_], scale: float, numerics: Numerics) -> F32:
    """q [T, H, d], k/v [n_kv, S, d] (already F16-rounded if the cache is F16), mask [T, S]
    -> [T, H * d], as ggml's flash-attention kernel or its mul_mat/softmax/mul_mat graph."""
    n_tokens, n_head, d = q.shape
    n_kv = k.shape[0]
    group = n_head // n_kv
    qq = f16(q) if numerics.f16_q else q
    out = np.empty((n_tokens, n_head, d), np.float32)
    for h in range(n_head):
        kh, vh = k[h // group], v[h // group]  # [S, d]
        scores = np.asarray(qq[:, h] @ kh.T, np.float32) * np.float32(scale)  # [T, S]
        if not numerics.flash_attn:
            s = np.where(mask, scores, np.float32(-np.inf))
            s = s - s.max(1, keepdims=True)
            w = np.exp(s).astype(np.float32)
            total = np.sum(w.astype(np.float64), axis=1, keepdims=True)
            w = (w * np.asarray(1.0 / total, np.float32)).astype(np.float32)
            if numerics.f16_kv:
                w = f16(w)  # src1 of mul_mat(V_f16, kq) converted to vec_dot_type F16
            out[:, h] = np.asarray(w @ vh, np.float32)
            continue
        for t in range(n_tokens):
            out[t, h] = _flash_one(scores[t], mask[t], vh, numerics.f16_kv)
    return out.reshape(n_tokens, n_head * d)


def _flash_one(scores: F32, visible: npt.NDArray[np.bool_], v: F32, f16_acc: bool) -> F32:
    """One query row of ggml_compute_forward_flash_attn_ext_f16_one_chunk (online softmax)."""
    acc = np.zeros(v.shape[1], np.float32)
    total = np.float32(0)
    best = np.float32(-np.inf)
    for ic in np.flatnonzero(visible):
        s = np.float32(scores[ic])
        ms = np.float32(1)
        vs = np.float32(1)
        if s > best:
            ms = np.float32(math.exp(float(best - s))) if best != -np.inf else np.float32(0)
            best = s
            acc = acc * ms
            if f16_acc:
                acc = f16(acc)
        else:
            vs = np.float32(math.exp(float(s - best)))
        acc = acc + v[ic] * vs
        if f16_acc:
            acc = f16(acc)
        total = np.float32(total * ms + vs)
    return np.asarray(acc * (np.float32(1) / total), np.float32)


# -- the forward -----------------------------------------------------------------------------------


@dataclass
class EmulatedCache:
    """Per layer: keys and values [n_kv, S, d] as stored (F16-rounded when the cache is F16)."""

    keys: list[F32 | None]
    values: list[F32 | None]
    positions: list[int] = field(default_factory=list)


def new_cache(emu: EmulatedModel) -> EmulatedCache:
    """An empty cache for ``emu``'s layers."""
    n = emu.model.config.n_layer
    return EmulatedCache([None] * n, [None] * n)


def emulated_forward(
    emu: EmulatedModel, tokens: list[int], cache: EmulatedCache, numerics: Numerics = Numerics()
) -> F32:
    """Run ``tokens`` (one batch, positions continuing the cache) -> logits ``[T, V]``."""
    cfg, w = emu.model.config, emu.model.weights
    start = len(cache.positions)
    pos = np.arange(start, start + len(tokens), dtype=np.int64)
    cache.positions.extend(int(p) for p in pos)
    all_pos = np.asarray(cache.positions, np.int64)
    x = w.token_embd[np.asarray(tokens)].astype(np.float32)  # [T, n_embd]
    if cfg.embed_scale != 1.0:
        x = (x * np.float32(cfg.embed_scale)).astype(np.float32)
    for il, lw in enumerate(w.layers):
        lin = {k.split(".", 1)[1]: v for k, v in emu.linears.items() if k.startswith(f"{il}.")}
        h = rms_norm(x, lw.attn_norm, cfg.norm_eps, numerics)
        d, n_kv, n_t = cfg.head_dim, cfg.n_head_kv, len(tokens)
        q = lin["wq"](h, numerics).reshape(n_t, cfg.n_head, d)
        k = lin["wk"](h, numerics).reshape(n_t, n_kv, d)
        v = lin["wv"](h, numerics).reshape(n_t, n_kv, d)
        if lw.q_norm is not None and lw.k_norm is not None:
            q = rms_norm(q, lw.q_norm, cfg.norm_eps, numerics)
            k = rms_norm(k, lw.k_norm, cfg.norm_eps, numerics)
        kw: dict[str, Any] = dict(
            rope_dim=cfg.layer_rope_dim(il),
            base=cfg.layer_rope_base(il),
            freq_scale=cfg.layer_rope_freq_scale(il),
            rope_type=cfg.rope_type,
            numerics=numerics,
        )
        q = rope(q, pos, **kw)
        k = rope(k, pos, **kw)
        kt, vt = k.transpose(1, 0, 2), v.transpose(1, 0, 2)  # [n_kv, T, d]
        if numerics.f16_kv:
            kt, vt = f16(kt), f16(vt)
        old_k, old_v = cache.keys[il], cache.values[il]
        keys = kt if old_k is None else np.concatenate([old_k, kt], axis=1)
        values = vt if old_v is None else np.concatenate([old_v, vt], axis=1)
        cache.keys[il], cache.values[il] = keys, values
        window = cfg.sliding_window if cfg.is_sliding(il) else 0
        mask = layers.attention_mask(pos, all_pos, window)
        a = attention(q, keys, values, mask, cfg.attn_scale, numerics)
        a = lin["wo"](a, numerics)
        if lw.post_attn_norm is not None:
            a = rms_norm(a, lw.post_attn_norm, cfg.norm_eps, numerics)
        x = (x + a).astype(np.float32)
        h = rms_norm(x, lw.ffn_norm, cfg.norm_eps, numerics)
        g = lin["ffn_gate"](h, numerics)
        act = gelu(g, numerics) if cfg.ffn_activation == ACT_GELU_TANH else silu(g)
        f = lin["ffn_down"]((act * lin["ffn_up"](h, numerics)).astype(np.float32), numerics)
        if lw.post_ffn_norm is not None:
            f = rms_norm(f, lw.post_ffn_norm, cfg.norm_eps, numerics)
        x = (x + f).astype(np.float32)
    x = rms_norm(x, w.output_norm, cfg.norm_eps, numerics)
    logits = emu.linears["output"](x, numerics)
    if cfg.final_softcap is not None:
        logits = layers.softcap(logits, cfg.final_softcap)
    return logits
