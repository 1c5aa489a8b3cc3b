"""The argument checks of :func:`verispec.check` and :func:`verispec.check_decoder`, by type and range.

The commands call those two functions with their parsed flags, so these checks are the CLI's and
the API's alike: one message for ``--scale inf`` and ``scale=float("inf")``. A Python caller can
hand anything, so each check first demands exactly its type (a bool is not a number, a float is not
an integer, a string is not a list of strings) and then its range; either failure is a
:class:`~verispec.reference.errors.CheckError` naming the argument and showing the value, raised
before anything is loaded or run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from verispec.reference.errors import CheckError


def shown(value: object) -> str:
    """A value as an error message shows it: its repr (cut to 60 characters) and its type."""
    text = repr(value)
    return f"{text[:57]}... ({type(value).__name__})" if len(text) > 60 else f"{text} ({type(value).__name__})"


def number(name: str, value: object, *, positive: bool = False, minimum: float | None = None) -> float:
    """A finite real number (an int or a float, not a bool): > 0 with ``positive``, >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CheckError(f"{name} must be a number, got {shown(value)}")
    if not math.isfinite(value):
        raise CheckError(f"{name} must be a finite number, got {value!r}")
    if positive and not value > 0:
        raise CheckError(f"{name} must be > 0, got {value!r}")
    if minimum is not None and value < minimum:
        raise CheckError(f"{name} must be >= {minimum:g}, got {value!r}")
    return float(value)


def optional_number(name: str, value: object, *, positive: bool = False, minimum: float | None = None) -> float | None:
    return None if value is None else number(name, value, positive=positive, minimum=minimum)


def integer(name: str, value: object, *, minimum: int | None = None) -> int:
    """An int (not a bool, not a float such as 2.0), >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise CheckError(f"{name} must be an integer, got {shown(value)}")
    if minimum is not None and value < minimum:
        raise CheckError(f"{name} must be >= {minimum}, got {value}")
    return value


# The most worker processes a run starts (--workers): each is a whole verifier or engine process
# (a model loaded per worker); past this a typo such as --workers 100000 would start processes
# until the machine gives out, and no machine runs that many blocks at once to any gain.
MAX_WORKERS = 256


def workers(value: object) -> int:
    """A worker count: an int in [1, MAX_WORKERS]."""
    count = integer("workers", value, minimum=1)
    if count > MAX_WORKERS:
        raise CheckError(f"workers must be at most {MAX_WORKERS} (one process each), got {count}")
    return count


def optional_integer(name: str, value: object, *, minimum: int | None = None) -> int | None:
    return None if value is None else integer(name, value, minimum=minimum)


def flag(name: str, value: object) -> bool:
    """True or False (not 0, 1 or "yes": a truthy string would silently switch a mode on)."""
    if not isinstance(value, bool):
        raise CheckError(f"{name} must be True or False, got {shown(value)}")
    return value


def optional_text(name: str, value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise CheckError(f"{name} must be a string, got {shown(value)}")
    return value


def optional_path(name: str, value: object) -> str | Path | None:
    if value is not None and not isinstance(value, (str, Path)):
        raise CheckError(f"{name} must be a path (a string or a Path), got {shown(value)}")
    return value


def texts(name: str, value: object) -> Sequence[str]:
    """A list or tuple of strings (a lone string is refused: it would be read as its characters)."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
        raise CheckError(f"{name} must be a list of strings, got {shown(value)}")
    return value


def optional_texts(name: str, value: object) -> Sequence[str] | None:
    return None if value is None else texts(name, value)


def part(name: str, value: object) -> str | Callable[..., Any] | None:
    """An implementation part: ``"module:function"``, the callable itself, or None."""
    if value is not None and not isinstance(value, str) and not callable(value):
        raise CheckError(f"{name} must be 'module:function' or a callable, got {shown(value)}")
    return value


def shard(value: object) -> tuple[int, int] | None:
    """``"I/S"`` or ``(I, S)`` (two integers) -> (I, S) with 1 <= I <= S."""
    if value is None:
        return None
    pair: object = value
    if isinstance(value, str):
        index, sep, count = value.partition("/")
        if sep and index.isdigit() and count.isdigit():
            pair = (int(index), int(count))
    if (
        not isinstance(pair, tuple)
        or len(pair) != 2
        or not all(isinstance(i, int) and not isinstance(i, bool) for i in pair)
        or not 1 <= pair[0] <= pair[1]
    ):
        raise CheckError(f"shard must be I/S with 1 <= I <= S, got {value!r}")
    return (pair[0], pair[1])
