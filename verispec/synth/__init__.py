"""Tiny synthetic GGUF models of the llama, mistral, phi3, gemma3 and gemma4 shapes (``verispec
models synth``): seeded and deterministic, NumPy only, loadable by transformers, llama.cpp, mlx-lm
and openvino-genai as well as verispec's own reader. What they are for: a whole decoder's
full-power verdict in minutes on CPU, before a confirmation on the real model
(docs/checking-decoders.md, "Two stages").

    from verispec.synth import synthesize
    path = synthesize("llama", out_dir, seed=0)   # out_dir/llama-seed0.gguf


Also here:

- :mod:`.gguf_writer`: A tiny, independent GGUF writer: the synthetic models' files, and the tests' files broken on purpose.
- :mod:`.quants`: Quantize float32 weights to the GGUF types the synthetic models write, with NumPy alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from verispec.synth.models import FILE_TYPES, VARIANTS, SynthError, check_request, write_synthetic

__all__ = ["ARCHITECTURES", "DEFAULT_TYPES", "Architecture", "SynthError", "synth_filename", "synthesize"]


@dataclass(frozen=True)
class Architecture:
    name: str  # what `verispec models synth --arch` takes
    variant: str  # the synthetic model of verispec.synth.models.VARIANTS
    shape_of: str  # the real family whose conventions it follows


ARCHITECTURES: dict[str, Architecture] = {
    a.name: a
    for a in (
        Architecture("llama", "tinyllama", "TinyLlama 1.1B: llama, GQA 8:1, untied output"),
        Architecture("mistral", "mistral", "Mistral 7B v0.2: llama, GQA 4:1, rope base 1e6"),
        Architecture("phi3", "phi3", "Phi-3 mini 4k: fused QKV and gate/up, NEOX RoPE"),
        Architecture("gemma3", "gemma3", "Gemma 3: QK-norm, post-norms, 5 sliding : 1 global, tied"),
        Architecture("gemma4", "gemma4", "Gemma 4 dense: per-layer head dims, K = V on global layers"),
    )
}
# F16: every loader dequantizes it exactly; --types Q4_0,Q8_0,... exercises a reader's quantized kernels
DEFAULT_TYPES: tuple[str, ...] = ("F16",)


def synth_filename(arch: str, seed: int) -> str:
    return f"{arch}-seed{seed}.gguf"


def _file_type(types: tuple[str, ...]) -> str:
    """``general.file_type`` as llama.cpp's quantizer names a file of these weight types: the one
    type's, or MOSTLY_Q4_0 for a mix (only reported by llama.cpp; openvino-genai reads it)."""
    if types == ("F32",):
        return "ALL_F32"
    return f"MOSTLY_{types[0]}" if len(set(types)) == 1 and f"MOSTLY_{types[0]}" in FILE_TYPES else "MOSTLY_Q4_0"


def synthesize(
    arch: str, out_dir: Path, *, seed: int = 0, types: tuple[str, ...] = DEFAULT_TYPES, tokenizer: str = "spm"
) -> Path:
    """Write the synthetic ``arch`` model to ``out_dir/<arch>-seed<seed>.gguf`` (the folder made if
    needed) and return its path. The same arguments give the same bytes. :class:`SynthError` for an
    unknown architecture, weight type or tokenizer, or a negative seed, before anything is written."""
    if arch not in ARCHITECTURES:
        raise SynthError(f"unknown architecture {arch!r}; known: {', '.join(ARCHITECTURES)}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SynthError(f"the seed must be an integer >= 0, got {seed!r}")
    variant = VARIANTS[ARCHITECTURES[arch].variant]
    file_type = _file_type(types)
    check_request(variant, types, file_type, tokenizer)  # before the folder is made
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / synth_filename(arch, seed)
    write_synthetic(path, variant, seed=seed, quant_types=types, file_type=file_type, tokenizer=tokenizer)
    return path
