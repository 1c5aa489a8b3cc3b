"""Tiny random GGUF models written with gguf-py (the oracle writer), for tests and the lab's
measurements of the tests' own cases: :func:`write_tiny_gguf`, and :func:`one_layer_model`, the
loaded one-layer model that the decoder-law, depth and reference-logits tests share."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from verispec.reference.model import Model


def write_tiny_gguf(
    path: Path,
    arch: str = "llama",
    *,
    n_vocab: int = 64,
    n_embd: int = 32,
    n_layer: int = 3,
    n_head: int = 4,
    n_head_kv: int = 2,
    head_dim: int | None = None,
    n_ff: int = 48,
    context_length: int = 128,
    sliding_window: int = 4,
    softcap: float | None = None,
    tied: bool = True,
    seed: int = 0,
    skip: tuple[str, ...] = (),
    metadata: dict[str, Any] | None = None,
    weight_scale: float = 0.3,
) -> Path:
    """A small random float32 model in a real GGUF file (written with gguf-py, the oracle writer).

    ``skip`` leaves tensors out (to test missing-tensor errors); ``metadata`` adds or overrides
    raw keys (value types inferred: int -> uint32, float -> float32, str -> string).
    """
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    d = head_dim if head_dim is not None else n_embd // n_head
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(n_layer)
    writer.add_context_length(context_length)
    writer.add_embedding_length(n_embd)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10000.0 if arch == "llama" else 1e6)
    if head_dim is not None:
        writer.add_key_length(d)
        writer.add_value_length(d)
    if arch == "gemma3":
        writer.add_sliding_window(sliding_window)
    if softcap is not None:
        writer.add_final_logit_softcapping(softcap)
    for key, value in (metadata or {}).items():
        if isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        else:
            writer.add_string(key, str(value))

    def rand(*shape: int) -> Any:
        return (rng.standard_normal(shape) * weight_scale / np.sqrt(shape[-1])).astype(np.float32)

    def norm(n: int) -> Any:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    tensors: dict[str, Any] = {
        "token_embd.weight": (rng.standard_normal((n_vocab, n_embd)) * 0.5).astype(np.float32),
        "output_norm.weight": norm(n_embd),
    }
    if not tied:
        tensors["output.weight"] = rand(n_vocab, n_embd) * 4
    for il in range(n_layer):
        p = f"blk.{il}."
        tensors.update(
            {
                p + "attn_norm.weight": norm(n_embd),
                p + "attn_q.weight": rand(n_head * d, n_embd) * 4,
                p + "attn_k.weight": rand(n_head_kv * d, n_embd) * 4,
                p + "attn_v.weight": rand(n_head_kv * d, n_embd),
                p + "attn_output.weight": rand(n_embd, n_head * d),
                p + "ffn_norm.weight": norm(n_embd),
                p + "ffn_gate.weight": rand(n_ff, n_embd),
                p + "ffn_up.weight": rand(n_ff, n_embd),
                p + "ffn_down.weight": rand(n_embd, n_ff),
            }
        )
        if arch == "gemma3":
            tensors.update(
                {
                    p + "attn_q_norm.weight": norm(d),
                    p + "attn_k_norm.weight": norm(d),
                    p + "post_attention_norm.weight": norm(n_embd),
                    p + "post_ffw_norm.weight": norm(n_embd),
                }
            )
    for name, array in tensors.items():
        if name not in skip:
            writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def one_layer_model(path: Path, n_vocab: int = 64) -> Model:
    """The tiny one-layer model of the decoder tests: ``n_vocab`` ids, 32 wide, 4 heads (2 KV heads),
    context 256, unit weight scale (so its rows are far from uniform); written to ``path``, then
    loaded as the reference model."""
    from verispec.reference.model import Model

    write_tiny_gguf(
        path,
        n_vocab=n_vocab,
        n_embd=32,
        n_layer=1,
        n_head=4,
        n_head_kv=2,
        context_length=256,
        weight_scale=1.0,
    )
    return Model.load(path)
