"""Rebuild ``spec/data/real_rows.npz``: real target/draft row pairs from the two real models.

The encoding and the sources are :mod:`verispec.spec.real_rows`'s; this script runs the models
(``verispec models fetch`` first), so it lives in the lab, above the product it feeds.

    python -m lab.build_real_rows --build
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from verispec.reference.model import Model
from verispec.reference.tokenizer import Tokenizer
from verispec.registry import resolve_model
from verispec.spec.real_rows import DATA, SOURCES, encode_rows, load_pairs


def build(out: Path = DATA) -> None:  # pragma: no cover - needs the real models
    """Run the models and write ``out`` (see the module docstring)."""
    arrays: dict[str, npt.NDArray[np.generic]] = {}
    names: list[str] = []
    models: dict[str, tuple[Model, Tokenizer]] = {}
    for index, (model_name, prompt, positions) in enumerate(SOURCES):
        if model_name not in models:
            path = resolve_model(model_name)
            models[model_name] = (Model.load(path), Tokenizer.from_file(path))
        model, tokenizer = models[model_name]
        ids = tokenizer.encode(prompt, add_bos=tokenizer.add_bos)
        result = model.forward(ids, model.new_cache(len(ids) + 1), return_hidden=True)
        assert result.hidden is not None
        depth = model.config.n_layer // 2
        target = result.logits[-positions:]  # [k+1, V]
        draft = model.head(result.hidden[depth][-positions:-1])  # [k, V]: exit head at the same positions
        name = f"{model_name} exit@{depth}: {prompt[:40]!r}"
        names.append(name)
        for which, rows in (("target", target), ("draft", draft)):
            for key, value in encode_rows(rows).items():
                arrays[f"{index}_{which}_{key}"] = value
        print(f"{name}: V={target.shape[1]} k={positions - 1}", file=sys.stderr)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, names=np.array(names), **arrays)  # type: ignore[arg-type]
    print(f"wrote {out} ({out.stat().st_size} bytes)", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.build_real_rows", description=__doc__.splitlines()[0])
    parser.add_argument("--build", action="store_true", help="recompute spec/data/real_rows.npz from the models")
    args = parser.parse_args(argv)
    if args.build:
        build()
    for pair in load_pairs():
        print(f"{pair.name}: target {pair.target_logits.shape}, draft {pair.draft_logits.shape}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
