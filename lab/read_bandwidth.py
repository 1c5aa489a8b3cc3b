"""How fast this machine reads memory on 1 and on 2 threads: the ceiling of a decode step's stream.

    python -m lab.read_bandwidth [--mib 192] [--rounds 5]

Each thread sums its own float32 array of ``--mib`` MiB (NumPy releases the GIL in the sum, so two
threads read at once); the best of ``--rounds`` rounds, in GB/s over all threads. A decode step
streams every weight once (and, at long contexts, the float32 KV cache): where the step's bytes
divided by its time reach these figures, a second thread cannot make it faster. Prints one line;
nothing is saved (a property of the machine, not of verispec).
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np
import numpy.typing as npt


def read_gb_s(arrays: list[npt.NDArray[np.float32]], rounds: int) -> float:
    """GB/s of every array summed at once, one thread an array, the best of ``rounds``."""
    best = float("inf")
    for _ in range(rounds):
        threads = [threading.Thread(target=np.sum, args=(a,), kwargs={"dtype": np.float32}) for a in arrays]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        best = min(best, time.perf_counter() - start)
    return sum(a.nbytes for a in arrays) / best / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=192, help="MiB each thread reads (well past the caches)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    arrays = [np.ones(args.mib * 2**20 // 4, dtype=np.float32) for _ in range(2)]
    one, two = read_gb_s(arrays[:1], args.rounds), read_gb_s(arrays, args.rounds)
    print(f"read: 1 thread {one:.1f} GB/s, 2 threads {two:.1f} GB/s ({args.mib} MiB a thread)")


if __name__ == "__main__":
    main()
