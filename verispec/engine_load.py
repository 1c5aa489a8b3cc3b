"""Loading a model for a CLI command on the engine its ``--engine`` / ``--weights`` flags name.

:func:`verispec.commands.request.load` stays the reference loader (typed :class:`Model`, used by
calibrate and the early-exit measurements); :func:`load_engine` is the same thing for any engine.

The weights mode a command runs by default is ``auto`` (:func:`resolve_weights`): the fastest
lossless mode this installation has. That is the int8 mode (onnxruntime's MatMulNBits on the
file's own blocks): lossless with respect to its own law (speculation never changes its output;
a k-row verification pass gives each row what a 1-row pass gives, bit for bit). ``exact`` (the
same as ``f32``) is the reference's float32 numerics, checked against transformers in float32.
Without onnxruntime, or for an architecture or engine the int8 mode does not serve, ``auto`` is
the exact mode, and when that is for want of the kernels one stderr line says so.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from verispec.engine import FAST_ARCHITECTURES, load_model
from verispec.engine.matmul import ort_available
from verispec.engine.model import FastModel
from verispec.engine.sparse_head import HEAD_HELP as HEAD_HELP  # re-exported: the commands' --head help
from verispec.engine.sparse_head import HEAD_MODES as HEAD_MODES
from verispec.reference.chat import ChatFormat, optional_chat_format
from verispec.reference.gguf import GGUFFile
from verispec.reference.model import Model
from verispec.reference.tokenizer import Tokenizer
from verispec.registry import resolve_model

AUTO = "auto"
EXACT = "exact"  # the float32 mode by what it keeps: the reference's numerics (= "f32")
WEIGHTS_CHOICES: tuple[str, ...] = (AUTO, "int8", EXACT, "f32", "quantized")
WEIGHTS_HELP = (
    "auto: the fastest lossless mode installed, int8 when onnxruntime is, else exact; "
    "int8: the file's blocks with int8 activations (onnxruntime MatMulNBits; lossless w.r.t. its own law: "
    "speculation never changes its output); exact (= f32): dequantized once, the reference's float32 "
    "numerics (checked against transformers); quantized: the exact numerics from the GGUF blocks per layer "
    "(low memory, slow); fast engine only"
)
KERNELS_MISSING = (
    "verispec: note: onnxruntime is not installed, so the int8 mode's kernels are missing: "
    "running the exact float32 mode (pip install 'verispec[fast]' for the faster int8 mode)"
)


def resolve_weights(weights: str, *, engine: str = "fast", arch: str | None = None, backend: str = "auto") -> str:
    """The weights mode to load for a ``--weights`` value: ``exact`` is ``f32``; ``auto`` is
    ``int8`` on the fast engine for an architecture it implements when onnxruntime is
    importable, else ``f32`` (one stderr line when the kernels are what is missing: never a
    silent switch). An explicit ``backend`` (numpy or ort) names a float32 kernel, so ``auto``
    is ``f32`` with it. Any other value is returned as it is (the loader checks it)."""
    if weights == EXACT:
        return "f32"
    if weights != AUTO:
        return weights
    if engine != "fast" or backend != "auto" or (arch is not None and arch not in FAST_ARCHITECTURES):
        return "f32"
    if not ort_available():
        print(KERNELS_MISSING, file=sys.stderr)
        return "f32"
    return "int8"


@dataclass(frozen=True)
class EngineLoaded:
    """A model on either engine, its tokenizer, and its chat format (None when it has none)."""

    model: Model | FastModel
    tokenizer: Tokenizer
    chat: ChatFormat | None


def load_engine(
    source: "str | GGUFFile",
    *,
    need_chat: bool = False,
    engine: str = "fast",
    weights: str = AUTO,
    backend: str = "auto",
    pass_boundaries: Iterable[int] = (),
    head: str = "full",
    head_kernel: str | None = None,
    layer_kernel: str | None = None,
) -> EngineLoaded:
    """Resolve a registry name or path (or take an open file) and load it on ``engine`` with
    ``weights`` (:func:`resolve_weights`) on ``backend``, the int8 mode's head in mode ``head``
    (:data:`HEAD_HELP`) on ``head_kernel`` (None: the environment's or the default,
    engine.weights.HEAD_KERNELS), its layers on ``layer_kernel`` (likewise, engine.weights.LAYER_KERNELS).
    ``pass_boundaries``: the depths where the caller's passes start and stop (early exit's candidate
    depths, a layer-skip draft's exit layer; the fast engine cuts its fused layer chain there,
    :meth:`FastModel.load`).

    ModelError for an unknown engine / weights mode, InsufficientMemory before loading when the
    weights will not fit; with ``need_chat`` a model without a chat format is a ChatFormatError.
    """
    boundaries = tuple(pass_boundaries)
    opened: AbstractContextManager[GGUFFile] = (
        nullcontext(source) if isinstance(source, GGUFFile) else GGUFFile.open(resolve_model(source))
    )
    with opened as f:  # a file the caller opened stays open for it
        return _load(
            f,
            need_chat=need_chat,
            engine=engine,
            weights=weights,
            backend=backend,
            bounds=boundaries,
            head=head,
            head_kernel=head_kernel,
            layer_kernel=layer_kernel,
        )


def _load(
    f: GGUFFile,
    *,
    need_chat: bool,
    engine: str,
    weights: str,
    backend: str,
    bounds: tuple[int, ...],
    head: str,
    head_kernel: str | None,
    layer_kernel: str | None,
) -> EngineLoaded:
    weights = resolve_weights(weights, engine=engine, arch=str(f.get("general.architecture", "")), backend=backend)
    model = load_model(
        f,
        engine=engine,
        weights=weights,
        backend=backend,
        pass_boundaries=bounds,
        head=head,
        head_kernel=head_kernel,
        layer_kernel=layer_kernel,
    )
    if engine == "fast" and isinstance(model, Model):  # said once, on stderr: never a silent switch
        print(
            f"verispec: note: the fast engine implements {', '.join(FAST_ARCHITECTURES)}; "
            f"running {model.config.arch} on the reference engine",
            file=sys.stderr,
        )
    tokenizer = Tokenizer.from_gguf(f.metadata)
    chat = optional_chat_format(f.metadata, required=need_chat)
    return EngineLoaded(model, tokenizer, chat)


def head_stats_of(model: "Model | FastModel") -> dict[str, object] | None:
    """What a sparse head did (engine.sparse_head.HeadStats.as_dict), None for the full head."""
    if isinstance(model, FastModel) and model.sparse_head is not None:
        return model.sparse_head.stats.as_dict()
    return None


def weights_mode_of(model: "Model | FastModel") -> str:
    """The weights mode a loaded model runs (the reference engine: ``f32``)."""
    return model.weights_mode if isinstance(model, FastModel) else "f32"


def head_kernel_of(model: "Model | FastModel") -> str | None:
    """The int8 mode's head kernel a loaded model runs (``mlas`` or ``tile``, engine/tile_head.py,
    whatever instruction set), None for the other modes: with :func:`weights_mode_of`, the
    numerics an early-exit calibration is measured on and served for."""
    if not isinstance(model, FastModel) or model.weights_mode != "int8":
        return None
    return "tile" if model.store.head_kernel.startswith("tile") else "mlas"


def layer_kernel_of(model: "Model | FastModel") -> str | None:
    """The int8 mode's layer kernel a loaded model runs (``mlas`` or ``tile``, engine/tile_layers.py,
    whatever instruction set), None for the other modes: with :func:`weights_mode_of` and
    :func:`head_kernel_of`, the numerics an early-exit calibration is measured on and served for."""
    if not isinstance(model, FastModel) or model.weights_mode != "int8":
        return None
    return "tile" if model.store.layer_kernel.startswith("tile") else "mlas"
