"""Hugging Face transformers as an independent float32 oracle for our reference forward.

transformers loads a GGUF file on its own path: gguf-py's ``GGUFReader`` and ``dequantize``, its
own tensor-name map and per-architecture fix-ups (the llama Q/K row permutation undone, Gemma's
``1 + w`` norm convention undone), then a float32 PyTorch forward written by other people. Both
forwards therefore see the same dequantized numbers, and their logits may differ only by float32
rounding: a tolerance far below what llama.cpp's 8-bit activations allow.

Loading is made affordable without changing what is loaded: transformers 5.x rebuilds gguf-py's
``TensorNameMap`` once per module (~400 times, 12 s) and parses the file's metadata twice (config,
then tensors; 8 s per parse on a 49k-token vocabulary). :func:`load_hf_model` memoizes both for the
duration of one load.

torch and transformers are the ``oracle`` extra (pyproject.toml), installed by ``make test``; a
missing one is an error naming the install command, not a skip.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

INSTALL_HINT = "install the oracle extra: .venv/bin/pip install -e '.[dev,oracle]' (or run `make test`)"


def require_oracle() -> tuple[Any, Any]:
    """Import torch and transformers, or fail with the install command (never skip)."""
    try:
        import torch
        import transformers
    except ImportError as exc:  # pragma: no cover - exercised only on a broken setup
        raise AssertionError(f"the transformers oracle is not installed ({exc}); {INSTALL_HINT}") from exc
    try:
        import accelerate  # type: ignore[import-untyped]  # noqa: F401  (transformers refuses GGUF loading without it)
    except ImportError as exc:  # pragma: no cover
        raise AssertionError(f"accelerate is not installed ({exc}); {INSTALL_HINT}") from exc
    return torch, transformers


@contextlib.contextmanager
def memoized_gguf() -> Iterator[None]:
    """Within the block, gguf-py's name map and reader are built once per argument tuple."""
    import gguf

    from tests.support.gguf_oracle import PlainArrayReader

    original_map, original_reader = gguf.get_tensor_name_map, gguf.GGUFReader
    readers: dict[str, Any] = {}

    def reader(path: Any, *args: Any, **kwargs: Any) -> Any:
        key = str(path)
        if args or kwargs:
            readers[key] = original_reader(path, *args, **kwargs)
        elif key not in readers:
            readers[key] = PlainArrayReader(path)  # the same reading, without np.memmap's per-slice cost
        return readers[key]

    gguf.get_tensor_name_map = functools.cache(original_map)
    gguf.GGUFReader = reader  # type: ignore[misc,assignment]  # patched for the run, restored below
    try:
        yield
    finally:
        gguf.get_tensor_name_map, gguf.GGUFReader = original_map, original_reader  # type: ignore[misc]


def load_hf_model(path: Path) -> Any:
    """transformers' float32 causal LM for the GGUF file at ``path`` (in eval mode)."""
    torch, transformers = require_oracle()
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    with memoized_gguf():
        model = transformers.AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype=torch.float32
        )
    return model.eval()


def hf_logits(model: Any, tokens: Sequence[int]) -> npt.NDArray[np.float32]:
    """Logits ``[T, V]`` of one causal forward over ``tokens`` (no cache carried over)."""
    torch, _ = require_oracle()
    with torch.no_grad():
        out = model(torch.tensor([list(tokens)], dtype=torch.long), use_cache=False)
    return np.asarray(out.logits[0].float().numpy(), dtype=np.float32)


def hf_greedy(model: Any, prompt: Sequence[int], n_new: int) -> list[int]:
    """``n_new`` greedy tokens after ``prompt`` with transformers' own KV-cached generate()."""
    torch, _ = require_oracle()
    with torch.no_grad():
        out = model.generate(
            torch.tensor([list(prompt)], dtype=torch.long),
            max_new_tokens=n_new,
            min_new_tokens=n_new,
            do_sample=False,
            num_beams=1,
            attention_mask=torch.ones((1, len(prompt)), dtype=torch.long),
        )
    return [int(t) for t in out[0, len(prompt) :].tolist()]


# -- gemma4: transformers' model filled from gguf-py's dequantization ------------------------------

# transformers 5.24 maps only a few gemma4 GGUF keys (GGUF_CONFIG_MAPPING["gemma4"]: no
# rope.freq_base(_swa), key_length_swa, sliding_window_pattern, embedding_length_per_layer_input,
# shared_kv_layers) and falls back to Gemma4TextConfig defaults for the rest: 256-wide per-layer
# input embeddings over a 262 144-token table, head_dim 256, a 5:1 pattern. A small file therefore
# cannot go through from_pretrained(gguf_file=...). The oracle instead builds Gemma4ForCausalLM
# from the HF config the file was converted from and fills it with gguf-py's dequantization of the
# file's tensors: still transformers' own forward (proportional RoPE computed from the config, not
# from the file's rope_freqs; its own norms, masks and softcap), on the same numbers.
_GEMMA4_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
    "layer_output_scale.weight": "layer_scalar",
}


def _hf_gemma4_name(gguf_name: str) -> str | None:
    if gguf_name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if gguf_name == "output_norm.weight":
        return "model.norm.weight"
    if gguf_name == "rope_freqs.weight":
        return None  # transformers derives proportional RoPE from the config
    _, layer, suffix = gguf_name.split(".", 2)
    return f"model.layers.{layer}.{_GEMMA4_LAYER_NAMES[suffix]}"


def build_hf_gemma4(path: Path, hf_config: dict[str, Any]) -> Any:
    """transformers' Gemma4ForCausalLM (float32, eval) from ``hf_config`` and the GGUF's tensors
    as gguf-py dequantizes them; every parameter must be filled exactly once."""
    torch, transformers = require_oracle()
    import gguf

    reader = gguf.GGUFReader(str(path))
    tensors = {}
    for t in reader.tensors:
        name = _hf_gemma4_name(t.name)
        if name is None:
            continue
        array = gguf.quants.dequantize(t.data, t.tensor_type).reshape([int(n) for n in reversed(t.shape)])
        tensors[name] = torch.from_numpy(np.array(array, dtype=np.float32))  # a writable copy
    vocab = tensors["model.embed_tokens.weight"].shape[0]
    config = transformers.Gemma4TextConfig(vocab_size=vocab, tie_word_embeddings=True, **hf_config)
    model = transformers.Gemma4ForCausalLM(config).to(torch.float32)
    expected = set(model.state_dict())
    missing = expected - set(tensors) - {"lm_head.weight"}
    unexpected = set(tensors) - expected
    assert not missing and not unexpected, f"gemma4 state dict: missing {missing}, unexpected {unexpected}"
    model.load_state_dict(tensors, strict=False)
    return model.eval()
