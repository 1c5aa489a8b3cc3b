"""How fast ``--draft-cache FILE`` loads: MB/s for caches of about 1, 6 and 60 MB.

Each cache is a file in the current format (:meth:`SuffixCache.save`) of texts of
CACHE_SEQUENCE_TOKENS random ids below the vocabulary size of SmolLM2 (49,152), so loading
checks every id and keeps the newest CACHE_TOKENS tokens. Reported per size: the file's MB, the
load time (best of ``--repeats``), MB/s, then the time of the first proposal (a lazily built
structure pays its building there, so the load time alone would flatter it) and the mean time of
the next PROPOSALS proposals, each continuing 8 tokens drawn from a kept text. Run: ``python -m lab.draft_cache_load`` (from the
repository root; seeded, the ratios are what to compare between versions, not the absolute
times of one machine).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from verispec.reference.suffix_draft import CACHE_SEQUENCE_TOKENS, CACHE_TOKENS, DEPTH, SuffixCache, SuffixTree, walk

VOCAB = 49_152
PROPOSALS = 200
K = 8


def write_cache(path: Path, megabytes: float, seed: int) -> int:
    """A cache file of about ``megabytes`` MB in the current format (random texts made of a few
    thousand recurring phrases, so proposals find matches); returns its text count."""
    rng = random.Random(seed)
    phrases = [[rng.randrange(VOCAB) for _ in range(rng.randrange(3, 12))] for _ in range(2000)]

    def text() -> tuple[int, ...]:
        out: list[int] = []
        while len(out) < CACHE_SEQUENCE_TOKENS:
            out.extend(rng.choice(phrases))
        return tuple(out[:CACHE_SEQUENCE_TOKENS])

    cache = SuffixCache()
    cache.texts.extend(text() for _ in range(4))  # written as save() writes, without building a structure
    cache.save(path)
    per_text = path.stat().st_size / 4
    cache.texts.extend(text() for _ in range(max(0, round(megabytes * 1e6 / per_text) - 4)))
    cache.tokens = sum(len(t) for t in cache.texts)
    cache.save(path)
    return len(cache.texts)


def measure(megabytes: float, repeats: int, seed: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "cache.json"
        write_cache(path, megabytes, seed)
        size = path.stat().st_size / 1e6
        best = float("inf")
        for _ in range(repeats):
            started = time.perf_counter()
            cache = SuffixCache.load(path, VOCAB, max_tokens=CACHE_TOKENS, depth=DEPTH)
            best = min(best, time.perf_counter() - started)
        rng = random.Random(seed + 1)
        kept = list(cache.texts)
        times: list[float] = []
        proposed = 0
        for _ in range(PROPOSALS + 1):
            text = rng.choice(kept)
            cut = rng.randrange(8, len(text))
            started = time.perf_counter()
            proposed += len(walk([SuffixTree(DEPTH), cache.tree], list(text[cut - 8 : cut]), K))
            times.append(time.perf_counter() - started)
    return {
        "mb": size,
        "load_s": best,
        "mb_per_s": size / best,
        "first_s": times[0],
        "later_ms": 1000 * sum(times[1:]) / PROPOSALS,
        "proposed": proposed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,6,60", help="cache sizes in MB, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for mb in (float(x) for x in args.sizes.split(",")):
        r = measure(mb, args.repeats, args.seed)
        print(
            f"{r['mb']:7.2f} MB  load {r['load_s']:7.3f} s  {r['mb_per_s']:8.2f} MB/s  first proposal "
            f"{r['first_s']:6.3f} s  then {r['later_ms']:6.3f} ms each ({int(r['proposed'])} tokens proposed)",
            flush=True,
        )


if __name__ == "__main__":
    main()
