"""Model hyperparameters read from GGUF metadata, one reader per architecture.

The GGUF file names its architecture in ``general.architecture``; every other hyperparameter lives
under that prefix (``llama.block_count``, ``gemma3.rope.freq_base``, ...). :meth:`Config.from_gguf`
dispatches on the architecture and fills one flat, frozen :class:`Config` that the forward pass
reads: the forward never looks at metadata itself.

What each field means is what llama.cpp does with it (src/llama-model.cpp, src/models/llama.cpp,
src/models/gemma3.cpp, src/llama-hparams.cpp); where llama.cpp hard-codes a value instead of
reading it (gemma3's local RoPE base 10 000 and its 5-local-1-global layer pattern), so do we, and
the docstring says so.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from verispec.reference.errors import ModelError, UnsupportedArchitecture

if TYPE_CHECKING:
    from verispec.reference.gguf import GGUFFile

ROPE_NORM = "norm"  # rotate adjacent pairs (x[2i], x[2i+1])            -- ggml rope mode 0
ROPE_NEOX = "neox"  # rotate split halves  (x[i], x[i + rope_dim/2])    -- ggml rope mode 2

ACT_SILU = "silu"  # SwiGLU: down(silu(gate(x)) * up(x))
ACT_GELU_TANH = "gelu_tanh"  # GeGLU:  down(gelu_tanh(gate(x)) * up(x))


@dataclass(frozen=True)
class Config:
    """Everything the forward pass needs to know about a model, and nothing it does not."""

    arch: str  # general.architecture
    n_vocab: int  # rows of token_embd
    n_embd: int  # residual stream width
    n_layer: int
    n_head: int  # query heads
    n_head_kv: int  # key/value heads (GQA: query head h reads kv head h // group)
    head_dim: int  # attention.key_length (== value_length)
    n_ff: int  # feed-forward hidden width
    rope_base: float  # RoPE base of global-attention layers (rope.freq_base)
    rope_base_local: float  # RoPE base of sliding-window layers (== rope_base when none)
    rope_dim: int  # rope.dimension_count: leading dims of each head that rotate
    rope_type: str  # ROPE_NORM or ROPE_NEOX
    rope_scaling_type: str  # "none" or "linear" (others are refused at load)
    rope_scaling_factor: float  # positions are divided by this on global layers (1.0: none)
    norm_eps: float  # RMSNorm epsilon
    sliding_window: int  # keys visible to a sliding layer's query, itself included; 0: none
    sliding_layers: tuple[bool, ...]  # per layer: True = sliding-window attention
    context_length: int  # context_length the model was trained for
    final_softcap: float | None  # logits <- cap * tanh(logits / cap) when set
    embed_scale: float  # token embeddings are multiplied by this (gemma: sqrt(n_embd))
    attn_scale: float  # scores = (q . k) * attn_scale
    ffn_activation: str  # ACT_SILU or ACT_GELU_TANH
    qk_norm: bool  # per-head RMSNorm on Q and K before RoPE (gemma3)
    post_norms: bool  # RMSNorm on the attention and FFN outputs before the residual add
    # gemma4 only (the defaults leave every other architecture as it was):
    head_dim_swa: int = 0  # head dim of sliding layers (attention.key_length_swa); 0: head_dim
    rope_dim_swa: int = 0  # RoPE dims of sliding layers (rope.dimension_count_swa); 0: rope_dim
    rope_freqs_global_only: bool = False  # rope_freqs.weight applies to global layers only
    value_norm: bool = False  # unweighted RMSNorm on V before attention
    n_head_kv_layers: tuple[int, ...] = ()  # per-layer KV heads when they differ; n_head_kv = max

    @property
    def n_group(self) -> int:
        """Query heads per key/value head."""
        return self.n_head // self.n_head_kv

    def is_sliding(self, layer: int) -> bool:
        """Whether ``layer`` attends through a sliding window (else: to every earlier position)."""
        return self.sliding_layers[layer]

    def layer_head_dim(self, layer: int) -> int:
        """The head dim of ``layer`` (gemma4's sliding layers have their own)."""
        if self.head_dim_swa and self.is_sliding(layer):
            return self.head_dim_swa
        return self.head_dim

    def layer_n_head_kv(self, layer: int) -> int:
        """The number of key/value heads of ``layer`` (gemma4's global layers may have fewer)."""
        return self.n_head_kv_layers[layer] if self.n_head_kv_layers else self.n_head_kv

    def layer_rope_dim(self, layer: int) -> int:
        """The number of rotated dims per head in ``layer``."""
        if self.rope_dim_swa and self.is_sliding(layer):
            return self.rope_dim_swa
        return self.rope_dim

    def layer_rope_base(self, layer: int) -> float:
        """The RoPE frequency base of ``layer`` (local base on sliding layers)."""
        return self.rope_base_local if self.is_sliding(layer) else self.rope_base

    def layer_rope_freq_scale(self, layer: int) -> float:
        """Positions are multiplied by this before RoPE: 1/linear factor on global layers, else 1."""
        if self.is_sliding(layer) or self.rope_scaling_type == "none":
            return 1.0
        return 1.0 / self.rope_scaling_factor

    @classmethod
    def from_gguf(cls, f: "GGUFFile") -> "Config":
        """Read the config of the model in ``f``, dispatching on ``general.architecture``.

        Raises :class:`UnsupportedArchitecture` (listing the supported ones) for any other
        architecture, and :class:`ModelError` naming the key for a missing or bad hyperparameter.
        """
        arch = str(f.get("general.architecture", ""))
        reader = _READERS.get(arch)
        if reader is None:
            supported = ", ".join(sorted(_READERS))
            raise UnsupportedArchitecture(f"architecture {arch!r} is not supported (supported: {supported})")
        token_embd = f.tensors.get("token_embd.weight")
        if token_embd is None:
            raise ModelError("tensor 'token_embd.weight' is missing")
        shape = tuple(int(n) for n in token_embd.shape)  # [n_vocab, n_embd]
        if len(shape) != 2 or min(shape) <= 0:
            raise ModelError(
                f"tensor 'token_embd.weight' has shape {list(shape)}, expected [n_vocab, n_embd], both positive"
            )
        meta = _Metadata(f, arch)
        config = reader(meta, shape[0])
        if config.n_embd != shape[1]:
            raise ModelError(
                f"metadata key '{arch}.embedding_length' = {config.n_embd} but token_embd.weight has {shape[1]} columns"
            )
        return config


SUPPORTED_ARCHITECTURES: tuple[str, ...] = ("gemma3", "gemma4", "llama", "phi3")

# Metadata is bounded before it sizes anything (a tuple per layer, a cache per position), because a
# corrupt or hostile file can claim 2^64 - 1 layers as easily as 30. Counts and widths are bounded
# by the tensors present (see _Metadata); the context length, which no tensor carries, by this
# limit: 2^27 positions, 12x the longest context of a released GGUF model (Llama 4 Scout, 10M).
MAX_CONTEXT_LENGTH = 2**27


class _Metadata:
    """Typed access to ``{arch}.*`` keys, with errors that name the key.

    Also the bounds the tensor table puts on the hyperparameters: ``max_layers`` (the number of
    distinct ``blk.N.`` prefixes: every layer has its own tensors) and ``max_width`` (the largest
    dim of any tensor: every width -- n_embd, n_ff, n_head * head_dim -- is some tensor's dim).
    """

    def __init__(self, f: "GGUFFile", arch: str) -> None:
        self._f = f
        self.arch = arch
        layers: set[str] = set()
        widest = 0
        for name, info in f.tensors.items():
            parts = name.split(".")
            if len(parts) > 2 and parts[0] == "blk" and parts[1].isdigit():
                layers.add(parts[1])
            widest = max([widest, *(int(n) for n in info.shape)])
        self.max_layers = len(layers)
        self.max_width = widest

    def layer_count(self) -> int:
        """``block_count``, positive and at most the number of layers with tensors in the file."""
        n_layer = _positive("n_layer", self.integer("block_count"))
        if n_layer > self.max_layers:
            raise ModelError(
                f"metadata key '{self.arch}.block_count' = {n_layer}, but the file holds tensors "
                f"of {self.max_layers} layers"
            )
        return n_layer

    def width(self, name: str, suffix: str, default: int | None = None) -> int:
        """A positive width (n_embd, n_ff, a head count or dim), at most the widest tensor dim."""
        value = _positive(name, self.integer(suffix, default))
        if value > self.max_width:
            raise ModelError(
                f"hyperparameter {name} = {value} exceeds every tensor dim in the file "
                f"(the largest is {self.max_width})"
            )
        return value

    def context_length(self) -> int:
        value = _positive("context_length", self.integer("context_length"))
        if value > MAX_CONTEXT_LENGTH:
            raise ModelError(f"context_length {value} exceeds the limit {MAX_CONTEXT_LENGTH} (2^27)")
        return value

    def finite(self, suffix: str, default: float | None = None, *, positive: bool) -> float:
        """A finite number, > 0 (``positive``) or >= 0; ModelError naming the key otherwise."""
        value = self.number(suffix, default)
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            bound = "> 0" if positive else ">= 0"
            raise ModelError(f"metadata key '{self.arch}.{suffix}' = {value!r} must be finite and {bound}")
        return value

    def raw(self, key: str) -> Any:
        value = self._f.get(key, None)
        # A MetadataValue-like wrapper carries the Python value in .value.
        return getattr(value, "value", value)

    def integer(self, suffix: str, default: int | None = None) -> int:
        key = f"{self.arch}.{suffix}"
        value = self.raw(key)
        if value is None:
            if default is None:
                raise ModelError(f"metadata key {key!r} is missing")
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise ModelError(f"metadata key {key!r} = {value!r} is not an integer")
        return value

    def number(self, suffix: str, default: float | None = None) -> float:
        key = f"{self.arch}.{suffix}"
        value = self.raw(key)
        if value is None:
            if default is None:
                raise ModelError(f"metadata key {key!r} is missing")
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ModelError(f"metadata key {key!r} = {value!r} is not a number")
        return float(value)

    def optional_float(self, suffix: str) -> float | None:
        key = f"{self.arch}.{suffix}"
        return None if self.raw(key) is None else self.number(suffix)

    def text(self, suffix: str, default: str) -> str:
        value = self.raw(f"{self.arch}.{suffix}")
        return default if value is None else str(value)


def _integer_item(key: str, item: object) -> int:
    """One entry of an integer array (a per-layer count), ModelError naming the key otherwise."""
    if isinstance(item, bool) or not isinstance(item, int):
        raise ModelError(f"metadata key {key!r} holds {item!r}, not an integer")
    return item


def _positive(name: str, value: int) -> int:
    if value <= 0:
        raise ModelError(f"hyperparameter {name} = {value} must be positive")
    return value


def _rope_scaling(meta: _Metadata) -> tuple[str, float]:
    """(type, factor) from ``rope.scaling.*``: llama.cpp applies a linear factor as 1/factor.

    Only linear scaling (or none) is implemented; YaRN and LongRoPE change the RoPE formula and are
    refused by name rather than silently ignored.
    """
    kind = meta.text("rope.scaling.type", "none").lower()
    factor = meta.number("rope.scaling.factor", 0.0)
    if factor == 0.0:
        factor = meta.number("rope.scale_linear", 0.0)  # the older key name
    if kind not in ("none", "linear"):
        raise ModelError(f"rope scaling type {kind!r} is not supported (supported: none, linear)")
    if factor == 0.0 or factor == 1.0:
        return "none", 1.0
    if factor < 0.0 or not math.isfinite(factor):
        raise ModelError(f"rope scaling factor {factor!r} must be a positive number")
    return "linear", factor


def _check_heads(n_embd: int, n_head: int, n_head_kv: int) -> None:
    _positive("n_embd", n_embd)
    _positive("n_head", n_head)
    _positive("n_head_kv", n_head_kv)
    if n_head % n_head_kv != 0:
        raise ModelError(f"head_count {n_head} is not a multiple of head_count_kv {n_head_kv}")


def _head_dim(meta: _Metadata, n_embd: int, n_head: int) -> int:
    head_dim = meta.width("head_dim", "attention.key_length", n_embd // n_head)
    value_dim = meta.integer("attention.value_length", head_dim)
    if value_dim != head_dim:
        raise ModelError(f"attention.value_length {value_dim} != key_length {head_dim}")
    if n_head * head_dim > meta.max_width:  # the rows of attn_q
        raise ModelError(
            f"head_count {n_head} x head dim {head_dim} exceeds every tensor dim in the file "
            f"(the largest is {meta.max_width})"
        )
    return head_dim


def _rope_dim(meta: _Metadata, head_dim: int) -> int:
    rope_dim = meta.integer("rope.dimension_count", head_dim)
    if rope_dim <= 0 or rope_dim > head_dim or rope_dim % 2:
        raise ModelError(f"rope.dimension_count {rope_dim} must be even and in (0, {head_dim}]")
    return rope_dim


def _llama(meta: _Metadata, n_vocab: int) -> Config:
    """llama (SmolLM2, TinyLlama, Mistral, Llama 2/3): pre-norm, RoPE NORM, SwiGLU, GQA."""
    n_embd = meta.width("n_embd", "embedding_length")
    n_head = meta.width("n_head", "attention.head_count")
    n_head_kv = meta.width("n_head_kv", "attention.head_count_kv", n_head)
    _check_heads(n_embd, n_head, n_head_kv)
    n_layer = meta.layer_count()
    head_dim = _head_dim(meta, n_embd, n_head)
    rope_base = meta.finite("rope.freq_base", 10000.0, positive=True)
    scaling_type, scaling_factor = _rope_scaling(meta)
    return Config(
        arch=meta.arch,
        n_vocab=n_vocab,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        n_ff=meta.width("n_ff", "feed_forward_length"),
        rope_base=rope_base,
        rope_base_local=rope_base,
        rope_dim=_rope_dim(meta, head_dim),
        rope_type=ROPE_NORM,
        rope_scaling_type=scaling_type,
        rope_scaling_factor=scaling_factor,
        norm_eps=meta.finite("attention.layer_norm_rms_epsilon", positive=False),
        sliding_window=0,
        sliding_layers=(False,) * n_layer,
        context_length=meta.context_length(),
        final_softcap=None,
        embed_scale=1.0,
        attn_scale=1.0 / math.sqrt(head_dim),
        ffn_activation=ACT_SILU,
        qk_norm=False,
        post_norms=False,
    )


# llama.cpp hard-codes these for gemma3 (llama-model.cpp, LLM_ARCH_GEMMA3): the metadata carries
# neither the local RoPE base nor the layer pattern.
GEMMA3_ROPE_BASE_LOCAL = 10000.0
GEMMA3_SLIDING_PATTERN = 6  # layers il with il % 6 < 5 slide; every 6th layer is global
GEMMA3_27B_LAYERS = 62  # the 27B scales queries by 1/sqrt(n_embd / n_head) instead


def _sliding_layers(meta: _Metadata, n_layer: int, default_pattern: int) -> tuple[bool, ...]:
    """Per-layer sliding flags: ``attention.sliding_window_pattern`` if present, else the default.

    llama.cpp's ``set_swa_pattern(n)`` marks layer il sliding iff ``il % n < n - 1`` (n = 0: all
    layers slide). A per-layer list of booleans in the metadata is taken as is.
    """
    value = meta.raw(f"{meta.arch}.attention.sliding_window_pattern")
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        flags = tuple(bool(x) for x in value)
        if len(flags) != n_layer:
            raise ModelError(f"sliding_window_pattern has {len(flags)} entries for {n_layer} layers")
        return flags
    key = f"{meta.arch}.attention.sliding_window_pattern"
    pattern = default_pattern if value is None else _integer_item(key, value)
    if pattern < 0:
        raise ModelError(f"sliding_window_pattern {pattern} must be >= 0")
    return tuple(pattern == 0 or il % pattern < pattern - 1 for il in range(n_layer))


def _gemma3(meta: _Metadata, n_vocab: int) -> Config:
    """gemma3: scaled embeddings, QK-norm, NEOX RoPE, post-norms, GeGLU, 5 local : 1 global."""
    n_embd = meta.width("n_embd", "embedding_length")
    n_head = meta.width("n_head", "attention.head_count")
    n_head_kv = meta.width("n_head_kv", "attention.head_count_kv", n_head)
    _check_heads(n_embd, n_head, n_head_kv)
    n_layer = meta.layer_count()
    head_dim = _head_dim(meta, n_embd, n_head)
    sliding_window = meta.integer("attention.sliding_window", 0)
    if sliding_window < 0:
        raise ModelError(f"attention.sliding_window {sliding_window} must be >= 0")
    if sliding_window > 0:
        sliding = _sliding_layers(meta, n_layer, GEMMA3_SLIDING_PATTERN)
    else:  # llama.cpp: no window in the metadata -> every layer global
        sliding = (False,) * n_layer
    scaling_type, scaling_factor = _rope_scaling(meta)
    # gemma_pytorch config: query_pre_attn_scalar = head_dim, except the 27B (n_embd / n_head).
    query_scalar = n_embd / n_head if n_layer == GEMMA3_27B_LAYERS else float(head_dim)
    softcap = meta.finite("final_logit_softcapping", 0.0, positive=False)  # 0: none
    return Config(
        arch=meta.arch,
        n_vocab=n_vocab,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        n_ff=meta.width("n_ff", "feed_forward_length"),
        rope_base=meta.finite("rope.freq_base", 10000.0, positive=True),
        rope_base_local=GEMMA3_ROPE_BASE_LOCAL,
        rope_dim=_rope_dim(meta, head_dim),
        rope_type=ROPE_NEOX,
        rope_scaling_type=scaling_type,
        rope_scaling_factor=scaling_factor,
        norm_eps=meta.finite("attention.layer_norm_rms_epsilon", positive=False),
        sliding_window=sliding_window,
        sliding_layers=sliding,
        context_length=meta.context_length(),
        final_softcap=softcap if softcap else None,
        embed_scale=math.sqrt(n_embd),
        attn_scale=1.0 / math.sqrt(query_scalar),
        ffn_activation=ACT_GELU_TANH,
        qk_norm=True,
        post_norms=True,
    )


def _phi3(meta: _Metadata, n_vocab: int) -> Config:
    """phi3 (Phi-3, Phi-3.5, Phi-4-mini): llama's block with NEOX RoPE and fused QKV / gate-up.

    The fused tensors are split at load (reference/model.py); the forward is llama's. llama.cpp
    (src/models/phi3.cpp) reads ``attention.sliding_window`` and then disables it ("Phi SWA is
    currently disabled", PR 13676): every layer attends globally, and so do we. It scales Q by
    1/sqrt(head_dim) and attends with scale 1, which is ``attn_scale = 1/sqrt(head_dim)`` here.
    LongRoPE files (``rope_factors_long/short``) are refused at load.
    """
    llama = _llama(meta, n_vocab)
    if meta.integer("attention.sliding_window", 0) < 0:
        raise ModelError("attention.sliding_window must be >= 0")
    return dataclasses.replace(llama, rope_type=ROPE_NEOX)


def _gemma4(meta: _Metadata, n_vocab: int) -> Config:
    """gemma4, dense text decoder: gemma3's block with what llama.cpp's src/models/gemma4.cpp changes.

    * sliding and global layers have their own head dim (``attention.key_length_swa`` /
      ``key_length``), RoPE dims and base (``rope.*_swa`` / ``rope.*``); the layer pattern is the
      per-layer boolean array ``attention.sliding_window_pattern``;
    * global layers use "proportional" RoPE through ``rope_freqs.weight`` (factor 1e30 leaves a
      pair unrotated), sliding layers use no frequency factors;
    * V gets an unweighted RMSNorm; attention scale is 1 (Q and K are RMS-normed);
    * norm weights are stored as is (the converter's ``norm_shift`` is 0, unlike gemma3's 1);
    * each layer's output is multiplied by ``layer_output_scale.weight`` when present;
    * ``attn_v`` may be absent on a layer: V is then the K projection (``attention_k_eq_v``).

    Refused by name rather than computed wrongly: per-layer input embeddings
    (``embedding_length_per_layer_input`` > 0, E2B/E4B), KV sharing (``shared_kv_layers`` > 0),
    a sliding head dim larger than the global one, and MoE (26B-A4B). Per-layer KV-head counts
    (``head_count_kv`` as an array: gemma-4-31B's num_global_key_value_heads) are supported.
    """
    n_embd = meta.width("n_embd", "embedding_length")
    n_head = meta.width("n_head", "attention.head_count")
    n_layer = meta.layer_count()
    kv_value = meta.raw(f"{meta.arch}.attention.head_count_kv")
    kv_layers: tuple[int, ...] = ()
    if isinstance(kv_value, Sequence) and not isinstance(kv_value, (str, bytes)):
        key = f"{meta.arch}.attention.head_count_kv"  # converter: num_global_key_value_heads
        kv_layers = tuple(_integer_item(key, x) for x in kv_value)
        if len(kv_layers) != n_layer:
            raise ModelError(f"attention.head_count_kv has {len(kv_layers)} entries for {n_layer} layers")
        for count in kv_layers:
            _check_heads(n_embd, n_head, count)
        n_head_kv = max(kv_layers)
    else:
        n_head_kv = meta.width("n_head_kv", "attention.head_count_kv", n_head)
    _check_heads(n_embd, n_head, n_head_kv)
    for key in ("embedding_length_per_layer_input", "attention.shared_kv_layers"):
        if meta.integer(key, 0) != 0:
            raise ModelError(f"gemma4 {key} = {meta.integer(key)} is not supported")
    head_dim = _head_dim(meta, n_embd, n_head)
    head_dim_swa = meta.width("head_dim_swa", "attention.key_length_swa", head_dim)
    if meta.integer("attention.value_length_swa", head_dim_swa) != head_dim_swa:
        raise ModelError("attention.value_length_swa != key_length_swa")
    if head_dim_swa > head_dim:
        raise ModelError(f"attention.key_length_swa {head_dim_swa} > key_length {head_dim}")
    rope_dim_swa = meta.integer("rope.dimension_count_swa", head_dim_swa)
    if rope_dim_swa <= 0 or rope_dim_swa > head_dim_swa or rope_dim_swa % 2:
        raise ModelError(f"rope.dimension_count_swa {rope_dim_swa} must be even and in (0, {head_dim_swa}]")
    sliding_window = meta.integer("attention.sliding_window")
    if sliding_window <= 0:
        raise ModelError(f"attention.sliding_window {sliding_window} must be positive")
    pattern = meta.raw(f"{meta.arch}.attention.sliding_window_pattern")
    if not (isinstance(pattern, Sequence) and not isinstance(pattern, (str, bytes))):
        raise ModelError("gemma4 needs attention.sliding_window_pattern as a per-layer array")
    sliding = _sliding_layers(meta, n_layer, 0)
    scaling_type, scaling_factor = _rope_scaling(meta)
    rope_base = meta.finite("rope.freq_base", 10000.0, positive=True)
    softcap = meta.finite("final_logit_softcapping", 0.0, positive=False)  # 0: none
    return Config(
        arch=meta.arch,
        n_vocab=n_vocab,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        n_ff=meta.width("n_ff", "feed_forward_length"),
        rope_base=rope_base,
        rope_base_local=meta.finite("rope.freq_base_swa", rope_base, positive=True),
        rope_dim=_rope_dim(meta, head_dim),
        rope_type=ROPE_NEOX,
        rope_scaling_type=scaling_type,
        rope_scaling_factor=scaling_factor,
        norm_eps=meta.finite("attention.layer_norm_rms_epsilon", positive=False),
        sliding_window=sliding_window,
        sliding_layers=sliding,
        context_length=meta.context_length(),
        final_softcap=softcap if softcap else None,
        embed_scale=math.sqrt(n_embd),
        attn_scale=1.0,
        ffn_activation=ACT_GELU_TANH,
        qk_norm=True,
        post_norms=True,
        head_dim_swa=head_dim_swa,
        rope_dim_swa=rope_dim_swa,
        rope_freqs_global_only=True,
        value_norm=True,
        n_head_kv_layers=kv_layers,
    )


_READERS: dict[str, Callable[[_Metadata, int], Config]] = {
    "gemma4": _gemma4,
    "llama": _llama,
    "gemma3": _gemma3,
    "phi3": _phi3,
}
