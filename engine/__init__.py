"""verispec engine: the fast production path (NumPy + BLAS), same contracts as reference/.

``load_model(path, engine="fast" | "reference", weights="f32" | "quantized" | "int8",
backend=...)`` is the one entry
point the CLI uses; both engines satisfy :class:`reference.seams.TargetModel`.


The modules:

- :mod:`.architectures`: Which engines exist and which architectures the fast one implements (a leaf module: the package ``__init__`` and the modules it loads lazily both read it, ...
- :mod:`.blocks`: GGUF weight blocks -> the block format of an int-dot kernel, losslessly.
- :mod:`.fused`: The int8 mode's decoder layers as onnxruntime graphs: one graph between two attentions.
- :mod:`.huge_pages`: Put a load's weights on 2 MiB pages: the same bytes, fewer TLB misses a decode step.
- :mod:`.generate`: Plain decoding on the fast engine: :func:`reference.generate.decode_plain` (the one plain loop, its decode session) with the engine's forward (head on the ...
- :mod:`.lockstep`: Many decode loops in lockstep: each one's target passes batched with the others' into one pass.
- :mod:`.matmul`: The engine's one matmul seam: every projection ``x @ W.T`` goes through a :class:`Matmul`.
- :mod:`.native`: Native kernels: C sources shipped with the package, compiled here once, loaded with ctypes.
- :mod:`.model`: The fast forward pass: the same function as :mod:`reference.model`, laid out for BLAS.
- :mod:`.ort_pool`: onnxruntime's threads for the engine: ONE pool per process, shared by every session.
- :mod:`.pages`: Hand a mapped GGUF file's pages back after their bytes were repacked (peak RSS of a load).
- :mod:`.rope`: RoPE's partner of each dimension, shared by the engine's forward (engine/model.py) and its fused int8 graphs (engine/fused.py): a leaf module, so neither ...
- :mod:`.sparse_head`: An exact sparse head: the full head's top-k, computing the kernel only on candidate rows (a certified bound; proofs/sparse_head.py).
- :mod:`.tile_head`: The int8 mode's ``tile`` head kernel: the Q8 block-dot law on the file's Q8_0 head, repacked.
- :mod:`.tile_layers`: The int8 mode's ``tile`` layer kernel: the int8 layer law on tiles, one C call a layer half.
- :mod:`.sampling`: The target law, vectorized: bit-identical to :func:`reference.sampling.target_distribution`.
- :mod:`.verify_cost`: The measured verify-cost curve of a loaded model: what a pass over r rows costs, relative to 1.
"""

from __future__ import annotations

if __name__ != "verispec.engine":  # pragma: no cover - a guard, not a feature
    # The one import root is `verispec`; `import engine` from a checkout would load a second copy
    # of every module (two registries, two exception classes) and shadow a user's own `engine`.
    raise ImportError(f"import verispec.engine, not {__name__}: verispec installs no top-level 'engine' package")

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from verispec.engine.architectures import ENGINES, FAST_ARCHITECTURES
from verispec.reference.errors import ModelError

if TYPE_CHECKING:
    from verispec.engine.model import FastModel
    from verispec.reference.gguf import GGUFFile
    from verispec.reference.model import Model

__all__ = ["ENGINES", "FAST_ARCHITECTURES", "load_model"]


def load_model(
    path_or_file: str | Path | "GGUFFile",
    engine: str = "fast",
    weights: str = "f32",
    backend: str = "auto",
    pass_boundaries: Iterable[int] = (),
    head: str = "full",
    head_kernel: str | None = None,
    layer_kernel: str | None = None,
) -> "FastModel" | "Model":
    """Load a GGUF model on ``engine``; ``weights`` ("f32", "quantized" or "int8"), ``backend``
    ("auto", "numpy", "ort": the f32 mode's matmul kernel, engine.weights.resolve_backend) and
    ``pass_boundaries`` (depths where passes start and stop: the fused layers' chain is cut there,
    FastModel.load) apply to the fast one; ``head`` ("full" or "sparse", engine.sparse_head) and
    ``head_kernel`` (engine.weights.HEAD_KERNELS; None: the environment's or the default) and
    ``layer_kernel`` (engine.weights.LAYER_KERNELS, likewise) to its int8 mode.

    ModelError for an unknown engine, or for quantized weights on the reference engine (it always
    dequantizes everything); InsufficientMemory (a ModelError) before loading when the weights
    will not fit. An architecture the fast engine does not implement (see FAST_ARCHITECTURES) runs
    on the reference engine under ``engine="fast"`` with f32 weights (the CLI's default must work
    for every supported model); quantized weights for it are a ModelError.
    """
    if engine == "fast":
        from verispec.engine.model import FastModel

        if _architecture(path_or_file) not in FAST_ARCHITECTURES and weights == "f32":
            engine = "reference"
        else:
            return FastModel.load(
                path_or_file,
                weights=weights,
                backend=backend,
                pass_boundaries=pass_boundaries,
                head=head,
                head_kernel=head_kernel,
                layer_kernel=layer_kernel,
            )
    if engine == "reference":
        if head_kernel is not None:
            raise ModelError(f"head kernel {head_kernel!r} needs the fast engine's int8 mode")
        if layer_kernel is not None:
            raise ModelError(f"layer kernel {layer_kernel!r} needs the fast engine's int8 mode")
        if head != "full":
            raise ModelError(
                f"head mode {head!r} needs the fast engine's int8 mode (the reference computes every logit)"
            )
        if weights != "f32":
            raise ModelError(f"weights mode {weights!r} needs the fast engine (the reference keeps float32 weights)")
        from verispec.reference.model import Model

        return Model.load(path_or_file)
    raise ModelError(f"engine {engine!r} is not one of {', '.join(ENGINES)}")


def _architecture(path_or_file: str | Path | "GGUFFile") -> str:
    from verispec.reference.gguf import GGUFFile

    if isinstance(path_or_file, GGUFFile):
        return str(path_or_file.get("general.architecture", ""))
    with GGUFFile.open(path_or_file) as f:
        return str(f.get("general.architecture", ""))
