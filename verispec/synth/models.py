"""Tiny random GGUF models of five architectures' shapes, written like llama.cpp's converter.

``verispec models synth`` writes them (and the tests use them): a few layers, small widths, seeded
random weights, but exactly the tensor names, metadata keys and layout conventions that llama.cpp's
``convert_hf_to_gguf.py`` writes for each architecture (read there and in ``src/models/*.cpp``;
nothing here is guessed), so transformers, llama.cpp, mlx-lm and openvino-genai load them as they
load the real files, and a whole decoder gets a full-power verdict in minutes:

* llama (TinyLlama, Mistral): ``LlamaModel`` writes ``{arch}.vocab_size`` and
  ``rope.dimension_count`` (= head_dim), the usual hyperparameters, separate ``attn_q/k/v``, and
  permutes the rows of Q and K so that llama.cpp's adjacent-pair (NORM) RoPE applies (transformers
  undoes the permutation when it loads the file). Mistral is ``general.architecture = "llama"``;
  transformers recognises it by ``"mistral"`` in ``general.name``. The converter writes no sliding
  window for llama, and llama.cpp reads none.
* phi3 (``Phi3MiniModel``): fused ``attn_qkv`` (rows: Q, then K, then V), fused gate/up in
  ``ffn_up`` (``[2 * n_ff, n_embd]``: gate rows first, consumed by ggml_swiglu), no ``ffn_gate``,
  ``rope.scaling.original_context_length``, and ``attention.sliding_window`` from the HF config
  (2047 for Phi-3-mini-4k), which llama.cpp reads and then disables ("Phi SWA is currently
  disabled", llama.cpp PR 13676). LongRoPE models (128k) add ``rope_factors_long/short``; the
  4k shape written here has none.
* gemma3 (``Gemma3Model``): QK-norm, post-attention and post-FFN norms, tied output, ``key_length``
  = ``value_length`` = head_dim, a sliding window; the layer pattern (5 sliding : 1 global) and the
  local RoPE base (10 000) are hard-coded by llama.cpp and transformers alike, so the file carries
  neither. Norms are stored as the converter stores them (HF's ``1 + w``). The head dim is 256, as
  in every real Gemma 3: transformers scales queries by ``query_pre_attn_scalar`` (default 256),
  llama.cpp by head_dim, and the two agree only there.
* gemma4: see :data:`GEMMA4_HF_CONFIG`.

The vocabulary is a small SentencePiece one (``tokenizer.ggml.model = "llama"``, as TinyLlama,
Mistral and Phi-3 ship): ``<unk> <s> </s>``, the 256 byte tokens ``<0x00>..<0xFF>``, then scored
pieces; or (``tokenizer="bpe"``) a byte-level BPE one. Weights are quantized (verispec/synth/quants.py,
gguf-py's arithmetic) to a rotation of the types gguf-py writes and our reader reads: F16, BF16,
Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; norms stay F32 as llama.cpp keeps them. The file is written by
:class:`verispec.synth.gguf_writer.GGUFRecorder`: byte for byte what gguf-py's writer makes of the
same calls (tested), with NumPy alone. The same seed gives the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from verispec.reference.errors import SynthError as SynthError  # re-exported: its old home
from verispec.synth.gguf_writer import GGUFRecorder
from verispec.synth.quants import TYPE_IDS, quantize

# verispec/synth/quants.py writes these (as gguf-py does) and reference/quants.py reads them.
QUANT_ROTATION = ("Q4_0", "Q8_0", "Q4_1", "Q5_0", "Q5_1", "F16", "BF16")


@dataclass(frozen=True)
class Variant:
    """One synthetic model: an architecture and the shape conventions of a real model family."""

    name: str
    arch: str  # general.architecture
    general_name: str  # general.name (transformers detects Mistral by it)
    n_embd: int = 64
    n_layer: int = 3
    n_head: int = 8
    n_head_kv: int = 2
    n_ff: int = 96
    context_length: int = 256
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    tied: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # arch-specific metadata (suffix -> value)
    key_length: int = 0  # the head dim when it is not n_embd / n_head (gemma3), else 0

    @property
    def head_dim(self) -> int:
        return self.key_length or self.n_embd // self.n_head


VARIANTS: dict[str, Variant] = {
    # TinyLlama-1.1B: 32 query heads on 4 KV heads (GQA 8:1), rope base 10 000, untied output.
    "tinyllama": Variant("tinyllama", "llama", "TinyLlama 1.1B Chat v1.0", n_head=8, n_head_kv=1),
    # Mistral-7B-Instruct-v0.2: 32 on 8 (GQA 4:1), rope base 1e6, untied output.
    "mistral": Variant(
        "mistral", "llama", "mistralai_mistral-7b-instruct-v0.2", n_head=8, n_head_kv=2, rope_base=1_000_000.0
    ),
    # Phi-3-mini-4k: MHA (32 on 32), rope base 10 000, sliding_window 2047 in the metadata.
    "phi3": Variant(
        "phi3",
        "phi3",
        "Phi 3 Mini 4k Instruct",
        n_head=4,
        n_head_kv=4,
        extra={"rope.scaling.original_context_length": 256, "attention.sliding_window": 2047},
    ),
    # Gemma 3 (270m .. 27b): head dim 256 (see the module docstring), 6 layers so that the 5
    # sliding : 1 global pattern holds once, a 4-token window that bites on short prompts.
    "gemma3": Variant(
        "gemma3",
        "gemma3",
        "Gemma 3 tiny",
        n_layer=6,
        n_head=2,
        n_head_kv=1,
        rope_base=1_000_000.0,
        norm_eps=1e-6,
        tied=True,
        key_length=256,
        extra={"attention.sliding_window": 4},
    ),
    # Gemma 4, dense text decoder: written from GEMMA4_HF_CONFIG by Gemma4Model's conventions.
    "gemma4": Variant("gemma4", "gemma4", "Gemma 4 tiny", n_layer=5, n_head=4, n_head_kv=2, norm_eps=1e-6, tied=True),
}

# The Hugging Face Gemma4TextConfig the synthetic gemma4 file is "converted" from (the oracle
# builds transformers' model from it). Shaped like gemma-4-31B's dense decoder: sliding layers
# with a small head dim, global layers with a larger one, K = V on global layers
# (attention_k_eq_v), proportional RoPE on global layers; shrunk, with a 4-token window so that
# the window bites on short prompts, and the last layer global as Gemma 4 requires.
GEMMA4_HF_CONFIG: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 5,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "global_head_dim": 32,
    "sliding_window": 4,
    "layer_types": ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    "rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0},
    },
    "attention_k_eq_v": True,
    "num_global_key_value_heads": 1,  # global layers: 1 KV head, sliding: 2 (31B: 4 vs 16)
    "num_kv_shared_layers": 0,
    "hidden_size_per_layer_input": 0,
    "final_logit_softcapping": 30.0,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 256,
}

# -- vocabulary ------------------------------------------------------------------------------------

_PIECES = (
    "▁",
    "e",
    "t",
    "a",
    "o",
    "i",
    "n",
    "s",
    "h",
    "r",
    "l",
    "d",
    "c",
    "u",
    "m",
    "f",
    "p",
    "g",
    "w",
    "y",
    "b",
    "v",
    "k",
    ".",
    ",",
    "▁t",
    "▁a",
    "he",
    "in",
    "er",
    "▁th",
    "▁the",
    "on",
    "an",
    "re",
    "▁s",
    "▁w",
    "at",
    "en",
    "nd",
    "▁o",
    "▁c",
    "is",
    "es",
    "or",
    "▁f",
    "it",
    "▁b",
    "ar",
    "ed",
    "▁m",
    "▁p",
    "▁in",
    "ou",
    "▁to",
    "▁of",
    "▁and",
    "ing",
    "▁is",
    "▁model",
    "▁token",
    "▁fast",
    "▁says",
)
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_BYTE = 1, 2, 3, 6
BPE_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 0, 1, 2, as SmolLM2 ships them


def _byte_chars() -> list[str]:
    """GPT-2's bytes_to_unicode: the printable character that stands for each byte 0..255."""
    keep = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("\xa1"), ord("\xac") + 1))
        + list(range(ord("\xae"), ord("\xff") + 1))
    )
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def bpe_vocabulary() -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges) of a small byte-level BPE vocabulary (llama.cpp model
    "gpt2"): the three SmolLM2 specials, the 256 byte characters, then every left-to-right
    merge that builds the words of :data:`_PIECES` (``Ġ`` for the word-start marker); each merge's
    result is a token, so the vocabulary is a valid BPE one."""
    tokens = list(BPE_SPECIALS) + _byte_chars()
    merges: list[str] = []
    for piece in _PIECES:
        word = piece.replace("▁", "Ġ")
        if len(word) < 2:
            continue
        left = word[0]
        for ch in word[1:]:
            if left + ch not in tokens:
                merges.append(f"{left} {ch}")
                tokens.append(left + ch)
            left = left + ch
    types = [TOKEN_CONTROL] * len(BPE_SPECIALS) + [TOKEN_NORMAL] * (len(tokens) - len(BPE_SPECIALS))
    return tokens, types, merges


# Phi-3 appends its chat specials after the SentencePiece pieces (32000 <|endoftext|>, pad too).
PHI3_SPECIALS = ("<|endoftext|>", "<|assistant|>", "<|end|>", "<|user|>")


def spm_vocabulary(specials: tuple[str, ...] = ()) -> tuple[list[str], list[float], list[int]]:
    """(tokens, scores, token types) of a small SentencePiece vocabulary (ids: unk 0, bos 1,
    eos 2), with ``specials`` appended as control tokens."""
    pieces = list(_PIECES)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces + list(specials)
    types = (
        [TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_CONTROL]
        + [TOKEN_BYTE] * 256
        + [TOKEN_NORMAL] * len(pieces)
        + [TOKEN_CONTROL] * len(specials)
    )
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces))] + [0.0] * len(specials)
    return tokens, scores, types


# -- weights ---------------------------------------------------------------------------------------


def _tensors(v: Variant, n_vocab: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random float32 weights in GGUF layout ``[out, in]``, named as the converter names them."""

    def matrix(n_out: int, n_in: int, gain: float = 1.0) -> np.ndarray:
        return np.asarray(rng.standard_normal((n_out, n_in)) * gain / np.sqrt(n_in), dtype=np.float32)

    def norm(n: int) -> np.ndarray:
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    e, d, ff = v.n_embd, v.head_dim, v.n_ff
    q_out, kv_out = v.n_head * d, v.n_head_kv * d
    t: dict[str, np.ndarray] = {
        "token_embd.weight": rng.standard_normal((n_vocab, e)).astype(np.float32),
        "output_norm.weight": norm(e),
    }
    if not v.tied:
        t["output.weight"] = matrix(n_vocab, e, 3.0)
    for il in range(v.n_layer):
        p = f"blk.{il}."
        t[p + "attn_norm.weight"] = norm(e)
        if v.arch == "phi3":
            t[p + "attn_qkv.weight"] = matrix(q_out + 2 * kv_out, e, 2.0)
        else:
            t[p + "attn_q.weight"] = matrix(q_out, e, 2.0)
            t[p + "attn_k.weight"] = matrix(kv_out, e, 2.0)
            t[p + "attn_v.weight"] = matrix(kv_out, e)
        t[p + "attn_output.weight"] = matrix(e, q_out)
        t[p + "ffn_norm.weight"] = norm(e)
        if v.arch == "phi3":
            t[p + "ffn_up.weight"] = matrix(2 * ff, e)  # [gate; up]
        else:
            t[p + "ffn_gate.weight"] = matrix(ff, e)
            t[p + "ffn_up.weight"] = matrix(ff, e)
        t[p + "ffn_down.weight"] = matrix(e, ff)
    return t


def _gemma3_tensors(v: Variant, n_vocab: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Gemma 3 weights as Gemma3Model writes them: llama's names plus ``attn_q_norm`` /
    ``attn_k_norm`` ([head_dim]), ``post_attention_norm`` and ``post_ffw_norm``; tied output."""

    def matrix(n_out: int, n_in: int, gain: float = 1.0) -> np.ndarray:
        return np.asarray(rng.standard_normal((n_out, n_in)) * gain / np.sqrt(n_in), dtype=np.float32)

    def norm(n: int) -> np.ndarray:
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    e, d, ff = v.n_embd, v.head_dim, v.n_ff
    t: dict[str, np.ndarray] = {
        "token_embd.weight": (rng.standard_normal((n_vocab, e)) * 0.2).astype(np.float32),
        "output_norm.weight": norm(e),
    }
    for il in range(v.n_layer):
        p = f"blk.{il}."
        t[p + "attn_norm.weight"] = norm(e)
        t[p + "attn_q.weight"] = matrix(v.n_head * d, e)
        t[p + "attn_k.weight"] = matrix(v.n_head_kv * d, e)
        t[p + "attn_v.weight"] = matrix(v.n_head_kv * d, e)
        t[p + "attn_output.weight"] = matrix(e, v.n_head * d)
        t[p + "attn_q_norm.weight"] = norm(d)
        t[p + "attn_k_norm.weight"] = norm(d)
        t[p + "post_attention_norm.weight"] = norm(e)
        t[p + "ffn_norm.weight"] = norm(e)
        t[p + "ffn_gate.weight"] = matrix(ff, e)
        t[p + "ffn_up.weight"] = matrix(ff, e)
        t[p + "ffn_down.weight"] = matrix(e, ff)
        t[p + "post_ffw_norm.weight"] = norm(e)
    return t


def _gemma3_metadata(w: Any, v: Variant) -> None:
    """Gemma3Model.set_gguf_parameters (no rope scaling: the 270m and 1b have none)."""
    w.add_context_length(v.context_length)
    w.add_embedding_length(v.n_embd)
    w.add_block_count(v.n_layer)
    w.add_feed_forward_length(v.n_ff)
    w.add_head_count(v.n_head)
    w.add_layer_norm_rms_eps(v.norm_eps)
    w.add_key_length(v.head_dim)
    w.add_value_length(v.head_dim)
    w.add_rope_freq_base(v.rope_base)
    w.add_head_count_kv(v.n_head_kv)
    w.add_sliding_window(int(v.extra["attention.sliding_window"]))


def _gemma4_tensors(n_vocab: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Gemma 4 weights as Gemma4Model (convert_hf_to_gguf.py) writes them: gemma3's names, norms
    stored as is (``norm_shift`` 0), ``layer_output_scale`` per layer (HF ``layer_scalar``), no
    ``attn_v`` on global layers when attention_k_eq_v, and the ``rope_freqs`` tensor of
    ``generate_extra_tensors``: 1.0 for the rotated pairs, 1e30 for the unrotated ones."""
    c = GEMMA4_HF_CONFIG
    e, ff, n_head = c["hidden_size"], c["intermediate_size"], c["num_attention_heads"]

    def matrix(n_out: int, n_in: int, gain: float = 1.0) -> np.ndarray:
        return np.asarray(rng.standard_normal((n_out, n_in)) * gain / np.sqrt(n_in), dtype=np.float32)

    def norm(n: int) -> np.ndarray:
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    t: dict[str, np.ndarray] = {
        "token_embd.weight": (rng.standard_normal((n_vocab, e)) * 0.2).astype(np.float32),
        "output_norm.weight": norm(e),
    }
    d_full = c["global_head_dim"]
    rotated = int(d_full * c["rope_parameters"]["full_attention"]["partial_rotary_factor"] / 2)
    t["rope_freqs.weight"] = np.array([1.0] * rotated + [1e30] * (d_full // 2 - rotated), dtype=np.float32)
    for il, kind in enumerate(c["layer_types"]):
        sliding = kind == "sliding_attention"
        d = c["head_dim"] if sliding else d_full
        n_kv = c["num_key_value_heads"] if sliding else c["num_global_key_value_heads"]
        p = f"blk.{il}."
        t[p + "attn_norm.weight"] = norm(e)
        t[p + "attn_q.weight"] = matrix(n_head * d, e)
        t[p + "attn_k.weight"] = matrix(n_kv * d, e)
        if sliding or not c["attention_k_eq_v"]:
            t[p + "attn_v.weight"] = matrix(n_kv * d, e)
        t[p + "attn_output.weight"] = matrix(e, n_head * d)
        t[p + "attn_q_norm.weight"] = norm(d)
        t[p + "attn_k_norm.weight"] = norm(d)
        t[p + "post_attention_norm.weight"] = norm(e)
        t[p + "ffn_norm.weight"] = norm(e)
        t[p + "ffn_gate.weight"] = matrix(ff, e)
        t[p + "ffn_up.weight"] = matrix(ff, e)
        t[p + "ffn_down.weight"] = matrix(e, ff)
        t[p + "post_ffw_norm.weight"] = norm(e)
        t[p + "layer_output_scale.weight"] = np.array([0.5 + rng.random()], dtype=np.float32)
    return t


def _gemma4_metadata(w: Any) -> None:
    """Gemma3Model.set_gguf_parameters plus Gemma4Model's additions, from GEMMA4_HF_CONFIG."""
    c = GEMMA4_HF_CONFIG
    rope = c["rope_parameters"]
    swa_layers = [kind == "sliding_attention" for kind in c["layer_types"]]
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    w.add_block_count(c["num_hidden_layers"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    # Gemma4Model writes a per-layer array when num_global_key_value_heads is set
    w.add_head_count_kv(
        [
            c["num_key_value_heads"] if kind == "sliding_attention" else c["num_global_key_value_heads"]
            for kind in c["layer_types"]
        ]
    )
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_rope_freq_base(rope["full_attention"]["rope_theta"])
    w.add_rope_freq_base_swa(rope["sliding_attention"]["rope_theta"])
    w.add_sliding_window(c["sliding_window"])
    w.add_final_logit_softcapping(c["final_logit_softcapping"])
    w.add_shared_kv_layers(c["num_kv_shared_layers"])
    w.add_embedding_length_per_layer_input(c["hidden_size_per_layer_input"])
    w.add_sliding_window_pattern(swa_layers)
    w.add_key_length(c["global_head_dim"])
    w.add_value_length(c["global_head_dim"])
    w.add_key_length_swa(c["head_dim"])
    w.add_value_length_swa(c["head_dim"])
    w.add_rope_dimension_count(c["global_head_dim"])  # proportional: n_rot = head dim, see rope_freqs
    w.add_rope_dimension_count_swa(c["head_dim"])


def _add_tensor(writer: Any, name: str, array: np.ndarray, qtype_name: str) -> str:
    """Write ``array`` as ``qtype_name`` (1-D tensors stay F32, as llama.cpp keeps norms)."""
    if array.ndim == 1 or qtype_name == "F32":
        writer.add_tensor(name, array)
        return "F32"
    if qtype_name == "F16":
        writer.add_tensor(name, array.astype(np.float16))
    else:
        writer.add_tensor(name, quantize(array, qtype_name), raw_shape=None, raw_dtype=TYPE_IDS[qtype_name])
    return qtype_name


# gguf.LlamaFileType values (llama.h ``enum llama_ftype``) of the files written here
FILE_TYPES = {
    "ALL_F32": 0,
    "MOSTLY_F16": 1,
    "MOSTLY_Q4_0": 2,
    "MOSTLY_Q4_1": 3,
    "MOSTLY_Q8_0": 7,
    "MOSTLY_Q5_0": 8,
    "MOSTLY_Q5_1": 9,
    "MOSTLY_BF16": 32,
}
GGML_QUANT_VERSION = 2  # general.quantization_version, as gguf-py writes it
TOKENIZERS = ("spm", "bpe")


def check_request(v: Variant, quant_types: tuple[str, ...], file_type: str, tokenizer: str) -> None:
    unknown = [t for t in quant_types if t not in TYPE_IDS]
    if not quant_types or unknown:
        raise SynthError(f"weight types must be some of {', '.join(TYPE_IDS)}; got {', '.join(quant_types) or 'none'}")
    if file_type not in FILE_TYPES:
        raise SynthError(f"unknown file type {file_type!r}; known: {', '.join(FILE_TYPES)}")
    if tokenizer not in TOKENIZERS:
        raise SynthError(f"unknown tokenizer {tokenizer!r}; known: {', '.join(TOKENIZERS)}")


def fill(
    w: Any,
    v: Variant,
    *,
    seed: int = 0,
    quant_types: tuple[str, ...] = QUANT_ROTATION,
    file_type: str = "MOSTLY_Q4_0",
    tokenizer: str = "spm",
) -> dict[str, str]:
    """Make the converter's calls for ``v`` on ``w`` (a :class:`GGUFRecorder`, or gguf-py's own
    ``GGUFWriter``: the same calls); returns {tensor name: ggml type name}."""
    check_request(v, quant_types, file_type, tokenizer)
    rng = np.random.default_rng(seed)
    if tokenizer == "bpe":
        tokens, types, merges = bpe_vocabulary()
    else:
        tokens, scores, types = spm_vocabulary(PHI3_SPECIALS if v.arch == "phi3" else ())
    w.add_name(v.general_name)
    w.add_file_type(FILE_TYPES[file_type])
    w.add_quantization_version(GGML_QUANT_VERSION)
    if v.arch == "gemma4":
        _gemma4_metadata(w)
    elif v.arch == "gemma3":
        _gemma3_metadata(w, v)
    else:
        _common_metadata(w, v, len(tokens))
    if tokenizer == "bpe":
        _bpe_tokenizer(w, tokens, types, merges)
    else:
        _spm_tokenizer(w, v, tokens, scores, types)
    written: dict[str, str] = {}
    matrices = 0
    for name, array in _weights(v, len(tokens), rng).items():
        qtype = quant_types[matrices % len(quant_types)] if array.ndim == 2 else "F32"
        matrices += array.ndim == 2
        written[name] = _add_tensor(w, name, array, qtype)
    return written


def _weights(v: Variant, n_vocab: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    if v.arch == "gemma4":
        return _gemma4_tensors(n_vocab, rng)
    if v.arch == "gemma3":
        return _gemma3_tensors(v, n_vocab, rng)
    return _tensors(v, n_vocab, rng)


def write_synthetic(
    path: Path,
    variant: str | Variant,
    *,
    seed: int = 0,
    quant_types: tuple[str, ...] = QUANT_ROTATION,
    file_type: str = "MOSTLY_Q4_0",
    tokenizer: str = "spm",
) -> dict[str, str]:
    """Write the synthetic model ``variant`` to ``path``; returns {tensor name: ggml type name}.

    Matrices cycle through ``quant_types`` in file order, so every type meets several roles.
    ``file_type`` is ``general.file_type`` (a ``gguf.LlamaFileType`` name): llama.cpp only
    reports it, but openvino-genai's GGUF reader picks its weight layout by it. ``tokenizer``
    "bpe" writes the byte-level BPE vocabulary of :func:`bpe_vocabulary` (SmolLM2's kind, the
    only kind openvino-genai's GGUF reader converts) instead of SentencePiece. The same arguments
    give the same bytes. Raises :class:`SynthError` for an unknown variant or option (nothing
    written).
    """
    if isinstance(variant, str) and variant not in VARIANTS:
        raise SynthError(f"unknown synthetic model {variant!r}; known: {', '.join(sorted(VARIANTS))}")
    v = VARIANTS[variant] if isinstance(variant, str) else variant
    recorder = GGUFRecorder(v.arch)
    written = fill(recorder, v, seed=seed, quant_types=quant_types, file_type=file_type, tokenizer=tokenizer)
    recorder.write(Path(path))
    return written


def _common_metadata(w: Any, v: Variant, n_vocab: int) -> None:
    """LlamaModel / Phi3MiniModel set_gguf_parameters."""
    w.add_context_length(v.context_length)
    w.add_embedding_length(v.n_embd)
    w.add_block_count(v.n_layer)
    w.add_feed_forward_length(v.n_ff)
    w.add_head_count(v.n_head)
    w.add_head_count_kv(v.n_head_kv)
    w.add_layer_norm_rms_eps(v.norm_eps)
    w.add_rope_freq_base(v.rope_base)
    w.add_rope_dimension_count(v.head_dim)
    if v.arch == "llama":
        w.add_vocab_size(n_vocab)
    for suffix, value in v.extra.items():
        key = f"{v.arch}.{suffix}"
        if isinstance(value, float):
            w.add_float32(key, value)
        else:
            w.add_uint32(key, int(value))


def _bpe_tokenizer(w: Any, tokens: list[str], types: list[int], merges: list[str]) -> None:
    """A byte-level BPE tokenizer (llama.cpp model "gpt2", pre "smollm"), ids as SmolLM2's:
    <|endoftext|> 0 (BOS, unknown), <|im_end|> 2 (EOS); no BOS is added."""
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(0)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(False)


def _spm_tokenizer(w: Any, v: Variant, tokens: list[str], scores: list[float], types: list[int]) -> None:
    """A SentencePiece tokenizer (llama.cpp model "llama"). Real Gemma 4 files say "gemma4", a
    model our tokenizer does not read; the synthetic gemma4 file uses SPM instead."""
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    if v.arch == "phi3":
        w.add_pad_token_id(tokens.index("<|endoftext|>"))
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
