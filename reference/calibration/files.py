"""The artifact's files: where it may be written, its sha256, the one atomic writer, the lens as npz
(written and read back with its shapes checked)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from verispec.reference.atomic import output_file, replace_file
from verispec.reference.errors import CalibrationError, OutputError
from verispec.reference.exit_head import Lens


def check_output_path(path: str | Path) -> None:
    """CalibrationError unless ``path`` can receive an artifact: its folder exists and is writable
    and ``path`` is not a folder. Checked before any work (and again when saving)."""
    path = Path(path)
    parent = path.parent
    if path.suffix != ".json":
        raise CalibrationError(f"--out {str(path)!r} must end in .json (the lens goes beside it)")
    if not parent.is_dir():
        raise CalibrationError(f"cannot write {str(path)!r}: folder {str(parent)!r} does not exist")
    if path.is_dir():
        raise CalibrationError(f"cannot write {str(path)!r}: it is a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CalibrationError(f"cannot write {str(path)!r}: folder {str(parent)!r} is not writable")
    try:
        output_file(path)  # the one writer's rule: absent or a regular file, never a FIFO or device
    except OutputError as exc:
        raise CalibrationError(str(exc)) from None


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes (hex), read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def atomic_write(path: Path, data: bytes) -> None:
    """``data`` becomes ``path`` whole or not at all (the project's one atomic writer)."""
    try:
        with replace_file(path) as fh:
            fh.write(data)
    except OutputError as exc:
        raise CalibrationError(str(exc)) from None


def npz_bytes(lens: Lens) -> bytes:
    import io

    buffer = io.BytesIO()
    np.savez(buffer, depths=np.asarray(lens.depths, dtype=np.int64), weight=lens.weight, bias=lens.bias)
    return buffer.getvalue()


def lens_from_npz(path: Path, blob: bytes) -> Lens:
    """The lens in ``blob`` (the bytes of ``path``): depths [K], weight [K, D, D], bias [K, D],
    all finite; another shape would load and crash mid-run."""
    import io
    import zipfile

    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as data:
            depths = np.asarray(data["depths"])
            weight = np.asarray(data["weight"], dtype=np.float32)
            bias = np.asarray(data["bias"], dtype=np.float32)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        raise CalibrationError(f"cannot read the lens {str(path)!r}: {str(exc)[:200]}") from None
    k = depths.shape[0] if depths.ndim == 1 else -1
    if (
        k < 1
        or weight.ndim != 3
        or weight.shape[0] != k
        or weight.shape[1] != weight.shape[2]
        or bias.shape != weight.shape[:2]
    ):
        raise CalibrationError(
            f"the lens {str(path)!r} has depths {list(depths.shape)}, weight {list(weight.shape)}, bias {list(bias.shape)}: "
            "expected [K], [K, D, D], [K, D]"
        )
    if not (np.all(np.isfinite(weight)) and np.all(np.isfinite(bias))):
        raise CalibrationError(f"the lens {str(path)!r} holds non-finite weights")
    return Lens(tuple(int(d) for d in depths), weight, bias)
