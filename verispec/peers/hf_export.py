"""A llama-architecture GGUF written out as a Hugging Face checkpoint folder, for peers that cannot
read GGUF (mlx-lm loads ``config.json`` + ``model.safetensors``).

The weights are verispec's own dequantization (reference/model.py, float32), so a peer that
computes in float32 on this folder has our numerics up to float32 rounding, and the target law of
check-decoder can come from our reference forward. What changes on the way:

* Q and K rows: ``convert_hf_to_gguf.py`` permutes them so that llama.cpp's adjacent-pair (NORM)
  RoPE applies; a Hugging Face llama rotates the two halves of each head (NEOX), so the rows are
  put back (:func:`unpermute_rows`, the inverse of the converter's ``permute``). The two forwards
  are then the same arithmetic.
* names: ``token_embd`` -> ``model.embed_tokens``, ``blk.N.attn_q`` -> ``model.layers.N.self_attn.q_proj``,
  and so on (:func:`tensor_names`); an untied ``output`` is ``lm_head``.

Only plain llama files are written: no biases, no RoPE scaling or frequency factors, no sliding
window, no soft cap, attention scale 1/sqrt(head_dim). Anything else is refused with
:class:`~reference.errors.UnsupportedArchitecture` (one line, naming what is missing). The folder
holds no tokenizer: the adapters speak token ids.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt

from verispec.reference.config import ROPE_NORM
from verispec.reference.errors import UnsupportedArchitecture
from verispec.reference.model import Model

F32 = npt.NDArray[np.float32]
CONFIG = "config.json"
WEIGHTS = "model.safetensors"


def unpermute_rows(w: F32, n_head: int) -> F32:
    """Rows of a Q or K projection ``[n_head * d, n_in]`` from llama.cpp's order back to Hugging
    Face's: the inverse of ``convert_hf_to_gguf.py``'s ``permute`` (``reshape(n_head, 2, d/2, n_in)
    .swapaxes(1, 2)``), so that half-split RoPE on the result equals pair RoPE on ``w``."""
    rows, n_in = w.shape
    if rows % (2 * n_head):
        raise UnsupportedArchitecture(f"projection rows {rows} are not n_head={n_head} heads of an even head dim")
    d = rows // n_head
    return np.ascontiguousarray(w.reshape(n_head, d // 2, 2, n_in).swapaxes(1, 2).reshape(rows, n_in))


def check_exportable(model: Model) -> None:
    """Refuse a model whose forward a plain Hugging Face llama would not compute."""
    cfg = model.config
    problems = []
    if cfg.arch != "llama":
        problems.append(f"architecture {cfg.arch!r} (only llama)")
    if cfg.rope_type != ROPE_NORM or cfg.rope_dim != cfg.head_dim:
        problems.append("RoPE other than llama's on the whole head")
    if cfg.rope_scaling_type != "none" or model.weights.rope_freqs is not None:
        problems.append("RoPE scaling or frequency factors")
    if cfg.sliding_window or any(cfg.sliding_layers):
        problems.append("a sliding window")
    if cfg.final_softcap is not None or cfg.embed_scale != 1.0:
        problems.append("a logit soft cap or an embedding scale")
    if not math.isclose(cfg.attn_scale, 1.0 / math.sqrt(cfg.head_dim), rel_tol=1e-6):
        problems.append(f"attention scale {cfg.attn_scale} (not 1/sqrt(head_dim))")
    for layer in model.weights.layers:
        if any(b is not None for b in (layer.bq, layer.bk, layer.bv, layer.bo, layer.q_norm, layer.out_scale)):
            problems.append("attention biases, QK norms or output scales")
            break
    if problems:
        raise UnsupportedArchitecture("cannot export as a Hugging Face llama: " + "; ".join(problems))


def tensors(model: Model) -> dict[str, F32]:
    """The checkpoint's tensors, Hugging Face names, float32, ``[out, in]`` as in the GGUF."""
    check_exportable(model)
    cfg, w = model.config, model.weights
    out: dict[str, F32] = {"model.embed_tokens.weight": w.token_embd, "model.norm.weight": w.output_norm}
    if w.output is not w.token_embd:
        out["lm_head.weight"] = w.output
    for i, layer in enumerate(w.layers):
        p = f"model.layers.{i}."
        out |= {
            p + "input_layernorm.weight": layer.attn_norm,
            p + "self_attn.q_proj.weight": unpermute_rows(layer.wq, cfg.n_head),
            p + "self_attn.k_proj.weight": unpermute_rows(layer.wk, cfg.n_head_kv),
            p + "self_attn.v_proj.weight": layer.wv,
            p + "self_attn.o_proj.weight": layer.wo,
            p + "post_attention_layernorm.weight": layer.ffn_norm,
            p + "mlp.gate_proj.weight": layer.ffn_gate,
            p + "mlp.up_proj.weight": layer.ffn_up,
            p + "mlp.down_proj.weight": layer.ffn_down,
        }
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


def config_json(model: Model, bos: int | None, eos: list[int]) -> dict[str, object]:
    """``config.json`` of a ``LlamaForCausalLM`` with the model's hyperparameters (both spellings
    of the RoPE base: ``rope_theta`` and transformers 5's ``rope_parameters``)."""
    cfg = model.config
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "torch_dtype": "float32",
        "vocab_size": cfg.n_vocab,
        "hidden_size": cfg.n_embd,
        "intermediate_size": cfg.n_ff,
        "num_hidden_layers": cfg.n_layer,
        "num_attention_heads": cfg.n_head,
        "num_key_value_heads": cfg.n_head_kv,
        "head_dim": cfg.head_dim,
        "rms_norm_eps": cfg.norm_eps,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.context_length,
        "rope_theta": cfg.rope_base,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_base},
        "rope_traditional": False,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": model.weights.output is model.weights.token_embd,
        "bos_token_id": bos,
        "eos_token_id": eos,
    }


def write_safetensors(path: Path, arrays: Mapping[str, F32]) -> None:
    """The safetensors format: an 8-byte little-endian header length, a JSON header of dtype,
    shape and byte offsets (padded with spaces to 8 bytes), then the raw little-endian data."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, a in arrays.items():
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for a in arrays.values():
            f.write(a.astype("<f4", copy=False).tobytes())


def export(gguf: str | Path, folder: str | Path) -> Path:
    """Write ``config.json`` and ``model.safetensors`` of the llama GGUF at ``gguf`` into
    ``folder`` (created); returns the folder."""
    from verispec.reference.tokenizer import Tokenizer

    model = Model.load(gguf)
    tokenizer = Tokenizer.from_file(gguf)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    write_safetensors(out / WEIGHTS, tensors(model))
    bos = getattr(tokenizer, "bos_id", None)
    config = config_json(model, None if bos is None else int(bos), sorted(int(t) for t in tokenizer.eog_ids))
    (out / CONFIG).write_text(json.dumps(config, indent=1) + "\n")
    return out
