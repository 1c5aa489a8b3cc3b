"""Vector files: ``KIND.jsonl`` per kind, ``manifest.json`` (versions, seed, count, sha256 per
file) and ``FORMAT.md`` (the format text, read from spec/VECTORS.md, shipped as package data)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path

from verispec.reference.json_input import field, loads, read_json_file, read_regular, shown
from verispec.reference.speculative import PROTOCOL_VERSION
from verispec.spec.vectors.cases import VectorSet, build_vectors
from verispec.spec.vectors.kinds import DEFAULT_COUNT, DEFAULT_SEED, FORMAT_VERSION, KINDS, VectorError
from verispec.spec.vectors.wire import Case, Json, encode_case


def format_markdown() -> str:
    """The format text (spec/VECTORS.md), the FORMAT.md written next to the files."""
    return resources.files("verispec.spec").joinpath("VECTORS.md").read_text(encoding="utf-8")


FORMAT_MARKDOWN = format_markdown()


def _file_bytes(cases: Sequence[Case]) -> bytes:
    return "".join(encode_case(case) + "\n" for case in cases).encode("utf-8")


def manifest_for(vectors: VectorSet, blobs: Mapping[str, bytes]) -> Json:
    """The manifest: versions, seed, count, and per file its kind, case count and sha256."""
    return {
        "format_version": FORMAT_VERSION,
        "protocol_version": PROTOCOL_VERSION,
        "generator": "verispec vectors",
        "seed": vectors.seed,
        "count": vectors.count,
        "files": [
            {
                "name": f"{kind}.jsonl",
                "kind": kind,
                "cases": len(vectors.cases[kind]),
                "sha256": hashlib.sha256(blobs[kind]).hexdigest(),
            }
            for kind in KINDS
            if kind in vectors.cases
        ],
    }


def write_vectors(out: Path, count: int = DEFAULT_COUNT, seed: int = DEFAULT_SEED) -> Json:
    """Write ``KIND.jsonl`` per kind, ``manifest.json`` and ``FORMAT.md`` into ``out``; return the
    manifest. Same (count, seed), same bytes."""
    vectors = build_vectors(count, seed)
    out.mkdir(parents=True, exist_ok=True)
    blobs = {kind: _file_bytes(cases) for kind, cases in vectors.cases.items()}
    for kind, blob in blobs.items():
        (out / f"{kind}.jsonl").write_bytes(blob)
    manifest = manifest_for(vectors, blobs)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    (out / "FORMAT.md").write_text(FORMAT_MARKDOWN, encoding="utf-8")
    return manifest


MANIFEST_BYTES = 1 << 20  # a manifest names a handful of files
VECTOR_FILE_BYTES = 256 << 20  # one KIND.jsonl (the large-V kinds are the biggest, far below)
CASE_FIELDS: tuple[tuple[str, type], ...] = (
    ("id", str),
    ("op", str),
    ("input", dict),
    ("expected", dict),
    ("tags", list),
)


def read_vectors(directory: Path) -> VectorSet:
    """Read a directory written by :func:`write_vectors`, checking versions and every sha256.
    Everything in it is untrusted: every file goes through the bounded reader
    (:mod:`reference.json_input`), every field is type-checked, and file names must be plain
    names inside the directory; anything else is one VectorError naming the file and field."""
    manifest_path = directory / "manifest.json"
    manifest = read_json_file(manifest_path, "vector manifest", max_bytes=MANIFEST_BYTES, error=VectorError)
    where = str(manifest_path)
    if not isinstance(manifest, dict):
        raise VectorError(f"{where}: expected a JSON object")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise VectorError(
            f"{where}: format_version {shown(manifest.get('format_version'))}, this verispec reads {FORMAT_VERSION}"
        )
    if manifest.get("protocol_version") != PROTOCOL_VERSION:
        raise VectorError(
            f"{where}: protocol_version {shown(manifest.get('protocol_version'))}, this verispec speaks {PROTOCOL_VERSION}"
        )
    seed = field(manifest, "seed", int, where, error=VectorError)
    count = field(manifest, "count", int, where, error=VectorError)
    cases: dict[str, list[Case]] = {}
    for index, entry in enumerate(field(manifest, "files", list, where, error=VectorError)):
        kind, cases_of_kind = _read_entry(directory, entry, f"{where} files[{index}]")
        if kind in cases:
            raise VectorError(f"{where} files[{index}]: kind {kind!r} listed twice")
        cases[kind] = cases_of_kind
    return VectorSet(cases, seed, count, str(directory))


def _read_entry(directory: Path, entry: object, where: str) -> tuple[str, list[Case]]:
    """One manifest entry's file: its sha256 checked, then its cases parsed and typed."""
    name = field(entry, "name", str, where, error=VectorError)
    kind = field(entry, "kind", str, where, error=VectorError)
    expected_cases = field(entry, "cases", int, where, error=VectorError)
    digest_wanted = field(entry, "sha256", str, where, error=VectorError)
    if kind not in KINDS:
        raise VectorError(f"{where}: kind {shown(kind)} is not one of {', '.join(KINDS)}")
    if Path(name).name != name or name in ("", ".", ".."):
        raise VectorError(f"{where}: file name {shown(name)} must be a plain name inside {directory}")
    path = directory / name
    blob = read_regular(path, "vector file", max_bytes=VECTOR_FILE_BYTES, error=VectorError)
    digest = hashlib.sha256(blob).hexdigest()
    if digest != digest_wanted:
        raise VectorError(f"{path}: sha256 {digest} does not match the manifest's {shown(digest_wanted)}")
    cases = [_case(line, f"{path} line {n}") for n, line in enumerate(blob.split(b"\n"), 1) if line.strip()]
    if len(cases) != expected_cases:
        raise VectorError(f"{path}: {len(cases)} cases, the manifest says {expected_cases}")
    return kind, cases


def _case(line: bytes, where: str) -> Case:
    case = loads(line, where, error=VectorError)
    for name, kind in CASE_FIELDS:
        field(case, name, kind, where, error=VectorError)
    assert isinstance(case, dict)
    return case
