"""The blocks a decoder layer is made of, one function each: norm, RoPE, attention, FFN, softcap.

Every function is pure NumPy on float32 arrays and states the ggml operation it mirrors, so a
reader can hold it against llama.cpp line by line. Linear layers use GGUF's weight layout
``[out, in]`` (the reverse of ggml's ``ne`` order), so ``y = x @ W.T``.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from verispec.reference.config import ACT_GELU_TANH, ACT_SILU, ROPE_NEOX, ROPE_NORM
from verispec.reference.errors import ModelError

F32 = npt.NDArray[np.float32]


def linear(x: F32, weight: F32, bias: F32 | None = None) -> F32:
    """``x @ weight.T (+ bias)``: x ``[T, in]``, weight ``[out, in]`` -> ``[T, out]``."""
    y = np.asarray(x @ weight.T, dtype=np.float32)
    return y if bias is None else y + bias


def rms_norm(x: F32, weight: F32, eps: float) -> F32:
    """ggml_rms_norm then ggml_mul: ``x / sqrt(mean(x^2) + eps) * weight`` over the last axis.

    Gemma's norm weights are used as stored: its GGUF converter already added the 1 that Gemma's
    ``(1 + w)`` convention needs.
    """
    mean_square = np.asarray(np.mean(np.square(x), axis=-1, keepdims=True), dtype=np.float32)
    return np.asarray(x / np.sqrt(mean_square + np.float32(eps)) * weight, dtype=np.float32)


def rope(
    x: F32,  # [T, H, d]
    positions: npt.NDArray[np.int64],  # [T]
    *,
    rope_dim: int,
    base: float,
    freq_scale: float,
    rope_type: str,
    freq_factors: F32 | None = None,  # [rope_dim / 2] (llama3's rope_freqs.weight)
) -> F32:
    """ggml_rope_ext without YaRN: rotate the first ``rope_dim`` dims of every head.

    Pair i (0 <= i < rope_dim/2) turns by ``theta = position * freq_scale * base^(-2i/rope_dim)
    / freq_factors[i]``. NORM pairs adjacent dims (2i, 2i+1); NEOX pairs dim i with
    i + rope_dim/2. Dims past ``rope_dim`` pass through.
    """
    half = rope_dim // 2
    inv_freq = base ** (-np.arange(half, dtype=np.float64) * 2.0 / rope_dim)  # [half]
    if freq_factors is not None:
        inv_freq = inv_freq / freq_factors.astype(np.float64)
    theta = (positions.astype(np.float64) * freq_scale)[:, None] * inv_freq[None, :]  # [T, half]
    cos = np.cos(theta).astype(np.float32)[:, None, :]  # [T, 1, half]
    sin = np.sin(theta).astype(np.float32)[:, None, :]  # [T, 1, half]
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
        raise ModelError(f"unknown rope type {rope_type!r}")
    return out


def attention_mask(
    query_positions: npt.NDArray[np.int64],  # [T]
    key_positions: npt.NDArray[np.int64],  # [S]
    sliding_window: int,
) -> npt.NDArray[np.bool_]:
    """``[T, S]`` True where a query may read a key: causal, and for a sliding layer
    ``q - k < sliding_window`` (llama.cpp's LLAMA_SWA_TYPE_STANDARD; 0 means no window)."""
    distance = query_positions[:, None] - key_positions[None, :]  # [T, S]
    visible = distance >= 0
    if sliding_window > 0:
        visible &= distance < sliding_window
    return np.asarray(visible, dtype=np.bool_)


# Query rows attended at a time by blocked_attention. Each row's softmax is its own, so blocks
# compute the same function; they bound the mask and the scores to [block, S] and
# [n_head, block, S]: an 8k-token prefill of SmolLM2 (9 heads) holds 9 * 256 * 8192 * 4 bytes =
# 75 MB of scores per temporary instead of 2.4 GB (and no 8-byte [T, S] distance matrix).
ATTENTION_QUERY_BLOCK = 256


def blocked_attention(
    q: F32,  # [T, n_head, d]
    k: F32,  # [n_kv, S, d]
    v: F32,  # [n_kv, S, d]
    query_positions: npt.NDArray[np.int64],  # [T]
    key_positions: npt.NDArray[np.int64],  # [S]
    sliding_window: int,
    scale: float,
    span_visible: npt.NDArray[np.bool_] | None = None,  # [T, T] tree attention (reference/tree_attention.py)
) -> F32:
    """:func:`attention` under :func:`attention_mask`, ATTENTION_QUERY_BLOCK query rows at a time
    -> ``[T, n_head * d]``. Memory is linear in T; BLAS may round a block's rows differently
    from a whole span's (different matrix shapes), within float32 matmul rounding.

    ``span_visible``: the span is a token tree whose T rows are the LAST T keys; query row i may
    read span key j only where ``span_visible[i, j]`` (its ancestors and itself), on top of the
    positional rule (which still decides the prefix keys and the sliding window)."""
    n_tokens, n_keys = q.shape[0], k.shape[1]
    parts = []
    for i in range(0, n_tokens, ATTENTION_QUERY_BLOCK):
        rows = slice(i, i + ATTENTION_QUERY_BLOCK)
        mask = attention_mask(query_positions[rows], key_positions, sliding_window)  # [B, S]
        if span_visible is not None:
            mask[:, n_keys - n_tokens :] &= span_visible[rows]
        parts.append(attention(q[rows], k, v, mask, scale))
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def attention(
    q: F32,  # [T, n_head, d]
    k: F32,  # [n_kv, S, d]  (every visible slot, this span's included)
    v: F32,  # [n_kv, S, d]
    mask: npt.NDArray[np.bool_],  # [T, S]
    scale: float,
) -> F32:
    """Grouped-query softmax attention -> ``[T, n_head * d]``.

    Query head h reads key/value head ``h // (n_head / n_kv)``: the heads of one group are
    consecutive, as in llama.cpp's ggml_mul_mat broadcast.
    """
    n_tokens, n_head, head_dim = q.shape
    n_kv = k.shape[0]
    group = n_head // n_kv
    qg = q.transpose(1, 0, 2).reshape(n_kv, group, n_tokens, head_dim)  # [n_kv, g, T, d]
    scores = np.asarray(qg @ k[:, None].transpose(0, 1, 3, 2), dtype=np.float32)  # [n_kv, g, T, S]
    scores *= np.float32(scale)
    scores = np.where(mask, scores, np.float32(-np.inf))
    scores -= np.max(scores, axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= np.sum(weights, axis=-1, keepdims=True)
    out = np.asarray(weights @ v[:, None], dtype=np.float32)  # [n_kv, g, T, d]
    return out.reshape(n_head, n_tokens, head_dim).transpose(1, 0, 2).reshape(n_tokens, -1)


def silu(x: F32) -> F32:
    """``x * sigmoid(x)`` (ggml_silu), with sigmoid(x) = (1 + tanh(x/2)) / 2 (no overflow)."""
    half = np.float32(0.5)
    return np.asarray(x * half * (np.float32(1.0) + np.tanh(half * x)), dtype=np.float32)


_GELU_C = np.float32(math.sqrt(2.0 / math.pi))


def gelu_tanh(x: F32) -> F32:
    """The tanh approximation of GELU (ggml_gelu; PyTorch ``approximate="tanh"``)."""
    inner = _GELU_C * x * (np.float32(1.0) + np.float32(0.044715) * x * x)
    return np.asarray(np.float32(0.5) * x * (np.float32(1.0) + np.tanh(inner)), dtype=np.float32)


def gated_ffn(x: F32, gate: F32, up: F32, down: F32, activation: str) -> F32:
    """``down(act(gate(x)) * up(x))``: SwiGLU for silu, GeGLU for gelu_tanh. ``[T, n_embd]``."""
    g = linear(x, gate)  # [T, n_ff]
    if activation == ACT_SILU:
        a = silu(g)
    elif activation == ACT_GELU_TANH:
        a = gelu_tanh(g)
    else:
        raise ModelError(f"unknown FFN activation {activation!r}")
    return linear(a * linear(x, up), down)


def softcap(logits: F32, cap: float) -> F32:
    """``cap * tanh(logits / cap)``: squashes logits into (-cap, cap)."""
    c = np.float32(cap)
    return np.asarray(c * np.tanh(logits / c), dtype=np.float32)
