"""The ``--draft-cache`` file: untrusted input, read in time linear in its size at NumPy speed.

Version 2 (what :func:`write_texts` writes) is binary, so that loading never parses JSON numbers
one by one (version 1, JSON, spent ~0.13 s per MB on the bracket scan, the parse and the id
checks):

    MAGIC                  the bytes b"verispec draft cache\\n"
    header                 one JSON object on one line (at most HEADER_BYTES), then b"\\n":
                           {"version": 2, "fingerprint": str, "depth": int, "max_tokens": int,
                            "texts": N, "tokens": M}
    lengths                N little-endian uint32: the length of each text, oldest first
    ids                    M little-endian uint32: the texts' token ids, concatenated

It holds texts only, never a built structure: the structure is rebuilt from the texts, so an
attacker who edits the file can choose which texts are remembered (that steers proposals, which
verification judges losslessly: the output does not change), never what the structure claims
about them. What is refused (DraftCacheError, a DraftError of exit category "input": exit 4, one
line): a file that is not a regular file or is larger than the caller's bound (before reading), a
header that is not one bounded JSON object of this version and vocabulary (an empty fingerprint
included, when the reader knows its own: nothing could check such a file's ids), a file whose size is not exactly what the header's counts give
(truncated, padded), lengths that do not add up to M, an id >= the vocabulary size. Version 1
files (JSON, written by older verispec) are still read, at JSON speed; the next save writes
version 2.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from verispec.reference.atomic import replace_file
from verispec.reference.errors import DraftCacheError, DraftError
from verispec.reference.json_input import loads, read_regular, shown

VERSION = 2
JSON_VERSION = 1
MAGIC = b"verispec draft cache\n"
HEADER_BYTES = 4096
SEQUENCE_TOKENS = 4096  # one remembered output is cut to its first this many tokens
_ID = np.dtype("<u4")


def surviving(texts: Sequence[Sequence[int]], max_tokens: int) -> list[Sequence[int]]:
    """The texts :meth:`reference.suffix_draft.SuffixCache.remember` would still hold after
    remembering all of ``texts`` in order: each is cut to SEQUENCE_TOKENS and skipped when
    shorter than 2 or longer than the cache; eviction drops the oldest, so what is left is the
    longest run of the newest texts that fits in ``max_tokens`` (oldest first)."""
    kept: list[Sequence[int]] = []
    total = 0
    for text in reversed(texts):
        text = text[:SEQUENCE_TOKENS]
        if len(text) < 2 or len(text) > max_tokens:
            continue
        if total + len(text) > max_tokens:
            break
        kept.append(text)
        total += len(text)
    return kept[::-1]


def surviving_spans(lengths: npt.NDArray[np.int64], max_tokens: int) -> list[tuple[int, int]]:
    """:func:`surviving` on texts given by their ``lengths`` only: the kept texts as (start,
    length) in the concatenation, oldest first (vectorized; the lengths are positive, so the
    running total from the newest text is nondecreasing and 'keep until the first text that does
    not fit' is 'keep while the running total fits')."""
    cut = np.minimum(lengths, SEQUENCE_TOKENS)
    eligible = (cut >= 2) & (cut <= max_tokens)
    newest_first = np.cumsum(np.where(eligible, cut, 0)[::-1])[::-1]  # tokens of this text and all newer eligible ones
    kept = np.flatnonzero(eligible & (newest_first <= max_tokens))
    starts = np.cumsum(lengths) - lengths
    return [(int(starts[i]), int(cut[i])) for i in kept]


def read_texts(path: Path, n_vocab: int, fingerprint: str, max_tokens: int, max_bytes: int) -> list[tuple[int, ...]]:
    """The texts a cache of ``max_tokens`` tokens keeps from the file at ``path`` (see the module
    docstring for what is refused)."""
    data = read_regular(path, "draft cache", max_bytes=max_bytes, error=DraftCacheError)
    if data.startswith(MAGIC):
        return _read_binary(data, path, n_vocab, fingerprint, max_tokens)
    return _read_json(data, path, n_vocab, fingerprint, max_tokens)


def _check_header(payload: Any, path: Path, version: int, fingerprint: str) -> dict[str, Any]:
    if not isinstance(payload, dict) or type(payload.get("version")) is not int or payload["version"] != version:
        raise DraftCacheError(f"draft cache {path} is not a version-{version} draft cache")
    if fingerprint and payload.get("fingerprint") == "":
        # a cache without a fingerprint could hold any vocabulary's ids: nothing would check them
        raise DraftCacheError(
            f"draft cache {path} has no vocabulary fingerprint, so its ids cannot be checked (delete it)"
        )
    if fingerprint and payload.get("fingerprint") != fingerprint:
        raise DraftCacheError(f"draft cache {path} was written for another vocabulary")
    return payload


def _count(header: dict[str, Any], name: str, path: Path) -> int:
    value = header.get(name)
    if type(value) is not int or value < 0:
        raise DraftCacheError(f"draft cache {path}: header field {name!r} must be a count, got {shown(value)}")
    return value


def _read_binary(data: bytes, path: Path, n_vocab: int, fingerprint: str, max_tokens: int) -> list[tuple[int, ...]]:
    end = data.find(b"\n", len(MAGIC), len(MAGIC) + HEADER_BYTES)
    if end < 0:
        raise DraftCacheError(f"draft cache {path}: no header line within {HEADER_BYTES} bytes")
    header = _check_header(
        loads(data[len(MAGIC) : end], f"draft cache {path} header", error=DraftCacheError), path, VERSION, fingerprint
    )
    n_texts, n_tokens = _count(header, "texts", path), _count(header, "tokens", path)
    body = end + 1
    expected = body + _ID.itemsize * (n_texts + n_tokens)
    if expected != len(data):
        raise DraftCacheError(
            f"draft cache {path} is {len(data)} bytes, but its header's {n_texts} texts and {n_tokens} tokens make {expected} (truncated or padded)"
        )
    lengths = np.frombuffer(data, _ID, n_texts, body).astype(np.int64)
    ids = np.frombuffer(data, _ID, n_tokens, body + _ID.itemsize * n_texts)
    if int(lengths.sum()) != n_tokens:
        raise DraftCacheError(
            f"draft cache {path}: the text lengths add up to {int(lengths.sum())}, not the header's {n_tokens} tokens"
        )
    if n_tokens and int(ids.max()) >= n_vocab:
        at = int(np.argmax(ids >= n_vocab))
        text = int(np.searchsorted(np.cumsum(lengths), at, side="right"))
        raise DraftCacheError(
            f"draft cache {path}: text {text} holds a value outside 0..{n_vocab - 1} (token ids only)"
        )
    return [tuple(ids[start : start + size].tolist()) for start, size in surviving_spans(lengths, max_tokens)]


def _read_json(data: bytes, path: Path, n_vocab: int, fingerprint: str, max_tokens: int) -> list[tuple[int, ...]]:
    """A version-1 (JSON) cache: {"version": 1, "fingerprint", "depth", "max_tokens", "texts"}."""
    payload = _check_header(loads(data, f"draft cache {path}", error=DraftCacheError), path, JSON_VERSION, fingerprint)
    texts = payload.get("texts")
    if not isinstance(texts, list):
        raise DraftCacheError(f"draft cache {path} is not a version-{JSON_VERSION} draft cache")
    for index, text in enumerate(texts):
        if not isinstance(text, list) or not all(type(t) is int and 0 <= t < n_vocab for t in text):
            raise DraftCacheError(
                f"draft cache {path}: text {index} holds a value outside 0..{n_vocab - 1} (token ids only)"
            )
    return [tuple(t) for t in surviving(texts, max_tokens)]


def write_texts(path: Path, texts: Sequence[Sequence[int]], *, fingerprint: str, depth: int, max_tokens: int) -> None:
    """Write ``texts`` as a version-2 cache, atomically (temp file in the same directory, fsync,
    rename); DraftError for an id outside the uint32 range the format holds."""
    lengths = np.asarray([len(t) for t in texts], dtype=np.int64)
    ids = np.fromiter((t for text in texts for t in text), dtype=np.int64, count=int(lengths.sum()))
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) > np.iinfo(_ID).max):
        raise DraftError(f"draft cache {path}: token ids must be in 0..{np.iinfo(_ID).max} to be saved")
    header = {
        "version": VERSION,
        "fingerprint": fingerprint,
        "depth": depth,
        "max_tokens": max_tokens,
        "texts": int(lengths.size),
        "tokens": int(ids.size),
    }
    import json

    head = MAGIC + json.dumps(header, separators=(",", ":")).encode("utf-8") + b"\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    with replace_file(path) as fh:  # mode 0666 & ~umask: readable by other users, as open() makes
        fh.write(head + lengths.astype(_ID).tobytes() + ids.astype(_ID).tobytes())
