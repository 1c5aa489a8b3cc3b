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
        import accelerate  # noqa: F401  (transformers refuses GGUF loading without it)
    except ImportError as exc:  # pragma: no cover
        raise AssertionError(f"accelerate is not installed ({exc}); {INSTALL_HINT}") from exc
    return torch, transformers


@contextlib.contextmanager
def _memoized_gguf() -> Iterator[None]:
    """Within the block, gguf-py's name map and reader are built once per argument tuple."""
    import gguf

    original_map, original_reader = gguf.get_tensor_name_map, gguf.GGUFReader
    readers: dict[str, Any] = {}

    def reader(path: Any, *args: Any, **kwargs: Any) -> Any:
        key = str(path)
        if key not in readers or args or kwargs:
            readers[key] = original_reader(path, *args, **kwargs)
        return readers[key]

    gguf.get_tensor_name_map = functools.cache(original_map)
    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.get_tensor_name_map, gguf.GGUFReader = original_map, original_reader


def load_hf_model(path: Path) -> Any:
    """transformers' float32 causal LM for the GGUF file at ``path`` (in eval mode)."""
    torch, transformers = require_oracle()
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    with _memoized_gguf():
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
    return [int(t) for t in out[0, len(prompt):].tolist()]
