"""`verispec inspect MODEL [--json]`: what is inside a GGUF file.

Prints the architecture, the hyperparameters (every ``<arch>.*`` metadata key), the tokenizer kind
(``tokenizer.ggml.model`` / ``.pre`` and the vocabulary size), the tensor table (name, ggml type,
numpy shape, bytes) and the file's sha256. ``--json`` prints the same as one JSON object.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from verispec.reference.gguf import GGUFFile, GGUFValueType, MetadataValue
from verispec.registry import resolve_model


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser("inspect", help="show a GGUF model's metadata and tensor table")
    parser.add_argument("model", metavar="MODEL", help="registry name or path to a .gguf file")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def describe(gguf: GGUFFile) -> dict[str, Any]:
    """The inspect report of an open file as a JSON-ready dict (the schema of ``--json``)."""
    arch = gguf.architecture
    prefix = f"{arch}."
    hyperparameters = {key: value for key, value in gguf.metadata.items() if key.startswith(prefix)}
    tokens = gguf.get("tokenizer.ggml.tokens")
    tensors = [
        {"name": t.name, "type": t.type_name, "shape": list(t.shape), "bytes": t.nbytes} for t in gguf.tensors.values()
    ]
    return {
        "path": str(gguf.path),
        "sha256": gguf.sha256(),
        "file_size": gguf.file_size,
        "gguf_version": gguf.version,
        "alignment": gguf.alignment,
        "data_offset": gguf.data_offset,
        "architecture": arch,
        "name": gguf.get("general.name"),
        "file_type": gguf.get("general.file_type"),
        "hyperparameters": hyperparameters,
        "tokenizer": {
            "model": gguf.get("tokenizer.ggml.model"),
            "pre": gguf.get("tokenizer.ggml.pre"),
            "vocab_size": len(tokens) if isinstance(tokens, list) else None,
        },
        "n_tensors": len(tensors),
        "n_parameters": sum(t.n_elements for t in gguf.tensors.values()),
        "tensor_bytes": sum(t.nbytes for t in gguf.tensors.values()),
        "tensors": tensors,
    }


def _display(gguf: GGUFFile, key: str, value: MetadataValue) -> str:
    """A metadata value for humans: f32 values in their shortest float32 form (1e-05, not 9.99e-06),
    long arrays summarised (``[30 items]``)."""
    if isinstance(value, list) and len(value) > 8:
        return f"[{len(value)} items]"
    if isinstance(value, float) and gguf.metadata_types.get(key) == GGUFValueType.FLOAT32:
        return str(np.float32(value))
    return str(value)


def text_report(gguf: GGUFFile, report: dict[str, Any]) -> str:
    tok = report["tokenizer"]
    lines = [
        f"file          {report['path']}",
        f"sha256        {report['sha256']}",
        f"gguf          v{report['gguf_version']}, {report['file_size']:,} bytes, alignment "
        f"{report['alignment']}, data at offset {report['data_offset']:,}",
        f"architecture  {report['architecture']}",
        f"name          {report['name']}",
        f"tokenizer     {tok['model']} (pre: {tok['pre']}), {tok['vocab_size']} tokens",
        f"parameters    {report['n_parameters']:,} in {report['n_tensors']} tensors, {report['tensor_bytes']:,} bytes",
        "",
        "hyperparameters",
    ]
    width = max((len(key) for key in report["hyperparameters"]), default=0)
    lines += [f"  {key:<{width}}  {_display(gguf, key, value)}" for key, value in report["hyperparameters"].items()]
    lines += ["", "tensors"]
    rows = [(t["name"], t["type"], "x".join(str(d) for d in t["shape"]), f"{t['bytes']:,}") for t in report["tensors"]]
    header = ("name", "type", "shape", "bytes")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for row in [header, *rows]:
        lines.append(f"  {row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]:<{widths[2]}}  {row[3]:>{widths[3]}}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    with GGUFFile.open(path) as gguf:
        report = describe(gguf)
        print(json.dumps(report, indent=2) if args.json else text_report(gguf, report))
    return 0
