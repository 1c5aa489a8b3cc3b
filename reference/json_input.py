"""The one reader for every JSON document the gate takes: wire lines, shard reports, draft caches,
calibrations, workloads, vector directories and manifests.

All of them are untrusted (written by a peer, a CI job, a user, or an attacker), and
``json.loads`` alone fails on them in ways that are not one-line errors: deep nesting raises
``RecursionError``, a 5,000-digit integer raises a bare ``ValueError``, a file that is really
``/dev/zero`` or a FIFO is read until memory runs out. So, before anything is parsed:

- the source is bounded: a file must be a regular file no larger than ``max_bytes`` (checked with
  ``fstat`` on the opened descriptor, then read with a cap, so a file that grows is still cut);
- the nesting is bounded: a linear pre-scan over the bracket characters outside strings
  (vectorized: one NumPy pass, so a 64 MB cache scans in well under a second) refuses more than
  ``max_depth`` levels before the recursive parser sees it;
- numbers are bounded: bare ``NaN`` / ``Infinity`` are refused, and an integer past Python's
  digit limit becomes this module's error, not a traceback.

Every failure raises the caller's error type (``error``, a :class:`VerispecError` subclass: a
draft cache raises DraftError, a calibration CalibrationError) with ONE line naming the source
(file or wire line) and what is wrong. :func:`field` does the same for a missing or mistyped
field of a parsed object.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from verispec.reference.errors import InputError, VerispecError

MAX_DEPTH = 64  # nesting levels; the deepest document the gate writes has fewer than 10
MAX_FILE_BYTES = 64 * 1024 * 1024  # default cap of a file read whole
MAX_SHOWN = 80  # characters of an untrusted value quoted in a message

T = TypeVar("T")

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # a JSON string (escapes included)
_DEPTH_STEP = np.zeros(256, dtype=np.int8)
_DEPTH_STEP[[ord("["), ord("{")]] = 1
_DEPTH_STEP[[ord("]"), ord("}")]] = -1


def shown(value: Any, limit: int = MAX_SHOWN) -> str:
    """``repr(value)`` cut to ``limit`` characters (an untrusted value in a message): a long list,
    string or integer is cut before it is formatted, so a 100 MB value costs nothing."""
    if isinstance(value, (list, tuple)) and len(value) > limit:
        value = list(value[:limit])
    elif isinstance(value, (str, bytes)) and len(value) > 4 * limit:
        value = value[: 4 * limit]
    elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * limit:
        return f"<an integer of {value.bit_length()} bits>"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def nesting_depth(data: bytes) -> int:
    """The deepest bracket nesting of a JSON text, strings skipped (a linear scan)."""
    outside = _STRING.sub(b"", data)  # brackets inside strings do not nest
    steps = _DEPTH_STEP[np.frombuffer(outside, dtype=np.uint8)]  # [len]: +1 open, -1 close, 0 other
    if steps.size == 0:
        return 0
    return int(np.cumsum(steps, dtype=np.int64).max(initial=0))


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"bare {name} is not JSON")


def loads(
    data: bytes | str,
    where: str,
    *,
    max_depth: int = MAX_DEPTH,
    error: type[VerispecError] = InputError,
    allow_nan: bool = False,
) -> Any:
    """Parse one JSON text from an untrusted source; ``error(one line)`` if it is not one.
    ``allow_nan``: let bare NaN / Infinity through, for a reader whose own field checks refuse
    them with the field's name (a calibration's thresholds)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    depth = nesting_depth(raw)
    if depth > max_depth:
        raise error(f"cannot read {where}: JSON nested {depth} levels deep (at most {max_depth})")
    try:
        text = raw.decode("utf-8")  # explicitly: json.loads would guess UTF-16 from a BOM
    except UnicodeDecodeError:
        raise error(f"cannot read {where}: not UTF-8 text") from None
    try:
        return json.loads(text) if allow_nan else json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise error(f"cannot read {where}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except (ValueError, RecursionError) as exc:  # an integer past the digit limit; bare NaN
        raise error(f"cannot read {where}: unacceptable JSON value ({str(exc)[:120]})") from None


def read_regular(
    path: str | Path, what: str, *, max_bytes: int = MAX_FILE_BYTES, error: type[VerispecError] = InputError
) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` (not a device, FIFO or directory)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not block the open
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise error(f"{what} {path} is not a regular file")
    with os.fdopen(fd, "rb") as fh:
        if info.st_size > max_bytes:
            raise error(f"{what} {path} is {info.st_size} bytes (at most {max_bytes})")
        try:
            data = fh.read(max_bytes + 1)
        except OSError as exc:
            raise error(f"{what} {path} cannot be read: {exc.strerror}") from None
    if len(data) > max_bytes:
        raise error(f"{what} {path} grew past {max_bytes} bytes while it was read")
    return data


def read_json_file(
    path: str | Path,
    what: str,
    *,
    max_bytes: int = MAX_FILE_BYTES,
    max_depth: int = MAX_DEPTH,
    error: type[VerispecError] = InputError,
    allow_nan: bool = False,
) -> Any:
    """A JSON file, bounded in size and nesting (see the module docstring)."""
    data = read_regular(path, what, max_bytes=max_bytes, error=error)
    return loads(data, f"{what} {path}", max_depth=max_depth, error=error, allow_nan=allow_nan)


def field(
    obj: Any, name: str, kind: type[T] | tuple[type, ...], where: str, *, error: type[VerispecError] = InputError
) -> T:
    """``obj[name]``, which must exist and be of ``kind`` (bool is not an int here)."""
    if not isinstance(obj, dict):
        raise error(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if name not in obj:
        raise error(f"{where}: field {name!r} is missing")
    value = obj[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        expected = " or ".join(k.__name__ for k in kinds)
        raise error(f"{where}: field {name!r} must be {expected}, got {shown(value)}")
    return value  # type: ignore[return-value]
