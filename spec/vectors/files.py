"""Vector files: ``KIND.jsonl`` per kind, ``manifest.json`` (versions, seed, count, sha256 per
file) and ``FORMAT.md`` (the format text, read from spec/VECTORS.md, shipped as package data)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path

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


def read_vectors(directory: Path) -> VectorSet:
    """Read a directory written by :func:`write_vectors`, checking versions and every sha256."""
    manifest_path = directory / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise VectorError(f"cannot read {manifest_path}: {exc}") from None
    if manifest.get("format_version") != FORMAT_VERSION:
        raise VectorError(
            f"{manifest_path}: format_version {manifest.get('format_version')!r}, this verispec reads {FORMAT_VERSION}"
        )
    if manifest.get("protocol_version") != PROTOCOL_VERSION:
        raise VectorError(
            f"{manifest_path}: protocol_version {manifest.get('protocol_version')!r}, this verispec speaks {PROTOCOL_VERSION}"
        )
    cases: dict[str, list[Case]] = {}
    for entry in manifest.get("files", []):
        path = directory / str(entry["name"])
        try:
            blob = path.read_bytes()
        except OSError as exc:
            raise VectorError(f"cannot read {path}: {exc}") from None
        digest = hashlib.sha256(blob).hexdigest()
        if digest != entry["sha256"]:
            raise VectorError(f"{path}: sha256 {digest} does not match the manifest's {entry['sha256']}")
        kind = str(entry["kind"])
        cases[kind] = [json.loads(line) for line in blob.decode("utf-8").splitlines() if line.strip()]
        if len(cases[kind]) != entry["cases"]:
            raise VectorError(f"{path}: {len(cases[kind])} cases, the manifest says {entry['cases']}")
    return VectorSet(cases, int(manifest["seed"]), int(manifest["count"]), str(directory))
