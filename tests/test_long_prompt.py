"""A long prompt costs memory linear in its length (100k characters with --truncate once grew
to 6.1 GB): attention runs in blocks of query rows, so no [n_head, T, S] score matrix is built.

The bound is counted, not timed: tracemalloc's peak (numpy reports its buffers to it) during one
forward of a T-token span on a tiny model, against what the blocked computation may hold.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.tiny_gguf import write_tiny_gguf
from verispec.reference import layers

N_HEAD, N_HEAD_KV, N_EMBD, N_FF, N_LAYER, N_VOCAB = 4, 2, 32, 48, 3, 64
T = 4096  # span length: 16 query blocks of 256
F32_BYTES = 4


def peak_bytes(run: Any) -> int:
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def allowed_bytes() -> int:
    """What a blocked forward may hold at its peak, term by term.

    * scores: at most 4 live float32 ``[n_head, block, S]`` temporaries (scores, the masked copy,
      the softmax weights, the fast engine's tiled mask);
    * the block's mask: an int64 distance, a bool mask and a bool copy, 10 bytes an entry of [block, S];
    * everything linear in T: 32 float32 rows of the widest activation (2 n_ff gate/up, the
      residual, q/k/v, logits) and the KV cache of every layer.
    """
    block = min(T, layers.ATTENTION_QUERY_BLOCK)
    scores = 4 * N_HEAD * block * T * F32_BYTES
    mask = 10 * block * T
    widest = max(2 * N_FF, N_VOCAB, N_EMBD)
    linear = 32 * T * widest * F32_BYTES + 2 * N_LAYER * N_HEAD_KV * T * (N_EMBD // N_HEAD) * F32_BYTES
    return scores + mask + linear


def test_the_bound_would_catch_an_unblocked_attention() -> None:
    # One whole [n_head, T, T] float32 score matrix alone exceeds the bound (as did the int64
    # [T, T] distance matrix the reference's mask was built from).
    assert N_HEAD * T * T * F32_BYTES > 2 * allowed_bytes()
    assert 8 * T * T > allowed_bytes()


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_long_span_costs_memory_linear_in_its_length(tmp_path: Path, engine: str, blas_single_thread: Any) -> None:
    from verispec.engine import load_model

    path = write_tiny_gguf(
        tmp_path / "long.gguf",
        n_vocab=N_VOCAB,
        n_embd=N_EMBD,
        n_layer=N_LAYER,
        n_head=N_HEAD,
        n_head_kv=N_HEAD_KV,
        n_ff=N_FF,
        context_length=T,
    )
    model = load_model(path, engine=engine)
    ids = np.random.default_rng(0).integers(0, N_VOCAB, size=T)
    cache = model.new_cache(T)
    if engine == "fast":
        peak = peak_bytes(lambda: model.forward(ids, cache, last_only=True))  # type: ignore[call-arg]
    else:
        peak = peak_bytes(lambda: model.forward(ids, cache))
    assert cache.length == T
    assert peak <= allowed_bytes(), f"{engine}: peak {peak / 2**20:.0f} MiB"


def test_blocked_attention_is_attention(blas_single_thread: Any) -> None:
    """Blocks compute every row's attention: against a float64 evaluation, within the float32
    error model of one row (Higham's gamma_n = n u / (1 - n u), u = 2^-24):

    * a score s_j = scale * q . k_j errs by at most e_j = scale * gamma_d * sum_i |q_i k_ji| + 2u |s_j|;
    * softmax weights then err relatively by at most 2 E + gamma_S + 4u, E = max_j e_j (first
      order: a shift of every score by at most E moves each weight by a factor within e^{+-2E});
    * the output sum_j w_j v_j adds gamma_S relative to sum_j w_j |v_j|.
    The bound used is twice the sum (second-order terms), per output element.
    """
    rng = np.random.default_rng(1)
    n, d, scale = 2 * layers.ATTENTION_QUERY_BLOCK + 37, 8, 0.35
    s = n + 5
    q = rng.standard_normal((n, N_HEAD, d)).astype(np.float32)
    k = rng.standard_normal((N_HEAD_KV, s, d)).astype(np.float32)
    v = rng.standard_normal((N_HEAD_KV, s, d)).astype(np.float32)
    query_positions, key_positions = np.arange(5, 5 + n, dtype=np.int64), np.arange(s, dtype=np.int64)
    got = layers.blocked_attention(q, k, v, query_positions, key_positions, 64, scale).reshape(n, N_HEAD, d)

    u = 2.0**-24

    def gamma(m: int) -> float:
        return m * u / (1 - m * u)

    group = N_HEAD // N_HEAD_KV
    mask = layers.attention_mask(query_positions, key_positions, 64)  # [T, S]
    for h in range(N_HEAD):
        q64, k64, v64 = q[:, h].astype(np.float64), k[h // group].astype(np.float64), v[h // group].astype(np.float64)
        scores = scale * q64 @ k64.T  # [T, S]
        err = scale * gamma(d) * (np.abs(q64) @ np.abs(k64).T) + 2 * u * np.abs(scores)
        scores[~mask] = -np.inf
        weights = np.exp(scores - scores.max(axis=1, keepdims=True))
        weights /= weights.sum(axis=1, keepdims=True)
        want = weights @ v64  # [T, d]
        worst = np.where(mask, err, 0).max(axis=1, keepdims=True)  # E per row
        bound = 2 * (2 * worst + 2 * gamma(s) + 4 * u) * (weights @ np.abs(v64))
        assert np.all(np.abs(got[:, h] - want) <= bound), f"head {h}"
