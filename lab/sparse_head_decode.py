"""The int8 engine's sparse head against its full head in plain decoding, in one process.

    OPENBLAS_NUM_THREADS=1 VERISPEC_THREADS=1 python -m lab.sparse_head_decode MODEL.gguf \
        [--tokens 16] [--rounds 3] [--json OUT.json]

:func:`verispec.bench.head.head_section` (what ``verispec bench --head sparse`` reports): greedy
decoding of the same prompt with the full head and with the sparse head on the same weights, in
alternating rounds, each step timed in its layer part and its head part. Saves the section with
its headline numbers flattened (the results page lists a file's top-level numbers) and the
provenance: date, machine, command, commit, load average at start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from lab.provenance import commit as head_commit
from lab.sparse_head_bounds import machine

PROMPT = "The history of the printing press begins in"


def measure(model_path: str, tokens: int, rounds: int) -> dict[str, Any]:
    from verispec.bench.head import head_section
    from verispec.engine.model import FastModel
    from verispec.reference.gguf import GGUFFile
    from verispec.reference.tokenizer import Tokenizer

    model = FastModel.load(model_path, weights="int8")
    with GGUFFile.open(model_path) as f:
        tokenizer = Tokenizer.from_gguf(f.metadata)
    prompt = tokenizer.encode(PROMPT, add_bos=tokenizer.add_bos)
    section = head_section(Path(model_path), model, prompt, tokens, rounds)
    work = section["sparse"]["work"]
    return {
        "full_tok_s": section["full"]["tok_s"],
        "sparse_tok_s": section["sparse"]["tok_s"],
        "sparse_over_full_tok_s": section["sparse_over_full_tok_s"],
        "full_head_share_of_step": section["full"]["head_share"],
        "sparse_head_share_of_step": section["sparse"]["head_share"],
        "sketch_share_of_sparse_head": work["sketch_seconds"] / work["seconds"] if work["seconds"] else 0.0,
        "chunks_evaluated_fraction": work["chunks_evaluated"] / max(1, work["chunks_offered"]),
        "fallback_fraction": work["fallback_fraction"],
        "same_tokens": "yes" if section["same_tokens"] else "NO",
        "threads": section["threads"],
        "section": section,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    load0 = os.getloadavg()
    result = measure(args.model, args.tokens, args.rounds)
    commit = head_commit(full=True)
    result["provenance"] = {
        "date": started,
        "finished_utc": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "command": "python -m lab.sparse_head_decode " + " ".join(sys.argv[1:] if argv is None else argv),
        "commit": commit,
        "loadavg_at_start": f"{load0[0]:.2f}",
        "loadavg_at_end": f"{os.getloadavg()[0]:.2f}",
        "machine": machine(),
        "note": f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')} "
        f"VERISPEC_THREADS={os.environ.get('VERISPEC_THREADS')}; 2 cores shared with other sessions",
    }
    stem = Path(args.model).name.split(".")[0].lower()
    out = args.json or Path("lab/measurements") / f"sparse_head_decode_{stem}.json"
    text = json.dumps(result, indent=2)
    out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
