"""Peak RSS of a long run of ``ReferenceLogits`` (spec/decoder/check.py) on the prefixes of a depth run.

A depth run asks for the rows of every prefix of every generation: almost all are new. The memo
keeps copies of rows within ``MEMO_BYTES`` (least recently used evicted), so the process's peak
RSS must level off at about the model, one forward and the bound, however many prefixes pass;
before, each row was a view of its whole [T, V] forward and nothing was evicted (the tiny llama:
+125 MB per 2,800 prefixes, without end). Prints the prefixes seen, the memo's rows and bytes
and the peak RSS (``ru_maxrss``) every ``--report`` generations; seeded random generations of
``--tokens`` ids after one prompt, on the synthetic tiny llama of the tests (322 ids) or
``--model``. Run: ``python -m lab.reference_logits_memory [--generations 4000]`` (from the
repository root). A benchmark: read the column of peak RSS, it must stop growing.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
from pathlib import Path

import numpy as np

from verispec.reference.model import Model
from verispec.spec.decoder.check import MEMO_BYTES, ReferenceLogits


def tiny_model(folder: Path) -> Path:
    from verispec.synth.models import Variant, write_synthetic

    path = folder / "tiny.gguf"
    write_synthetic(
        path,
        Variant("tiny", "llama", "tiny llama", n_embd=32, n_layer=1, n_head=4, n_head_kv=2, n_ff=48),
        quant_types=("F16",),
    )
    return path


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="a GGUF (default: the tests' tiny llama)")
    parser.add_argument("--generations", type=int, default=4000)
    parser.add_argument("--tokens", type=int, default=64, help="ids per generation (the depth mode's default)")
    parser.add_argument("--report", type=int, default=250, help="generations between lines")
    parser.add_argument("--memo-mb", type=float, default=MEMO_BYTES / 2**20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        model = Model.load(args.model or tiny_model(Path(folder)))
        vocab = int(model.config.n_vocab)
        logits = ReferenceLogits(model, memo_bytes=int(args.memo_mb * 2**20))
        rng = np.random.default_rng(0)
        prompt = (1, 5, 9, 13)
        print(
            f"vocab {vocab}, memo bound {args.memo_mb:.0f} MB; generations, prefixes, memo rows, memo MB, peak RSS MB"
        )
        for g in range(1, args.generations + 1):
            ids = prompt + tuple(int(t) for t in rng.integers(3, vocab, args.tokens))
            logits(ids)  # one forward of the whole generation: every prefix memoized at once
            if g % args.report == 0:
                print(
                    f"{g:8d} {g * (len(ids)):10d} {len(logits.memo):9d} {logits.retained / 2**20:8.1f} {peak_rss_mb():9.1f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
