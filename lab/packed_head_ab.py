"""The int8 engine with its head on the packed 16-row tile (lab/gguf_head_probe.py) or on MLAS:
whole decode steps, the k-row pass and greedy speculation, fresh processes taking turns.

    OPENBLAS_NUM_THREADS=1 VERISPEC_THREADS=1 python -m lab.packed_head_ab MODEL [--rounds 3] [--json OUT]

A lab experiment, not an engine mode: the child loads the int8 model as the engine does, and on
the ``packed`` side replaces the head behind the weight store's seam with :class:`PackedHead`
(the file's Q8_0 head repacked at its own size, 16 rows a tile; activations rounded to int8 per 32
in NumPy; the compiled probe kernel, one thread). Everything else (the layers on MLAS, the norms,
the softcap) is the engine's. ``VERISPEC_THREADS`` threads run the packed head too, each on a
range of tiles (checked bit for bit against one thread). The head's sums are not MLAS's, so the ``packed`` side is another
int8 law: its greedy tokens may differ from the engine's, and its own speculation must still
reproduce its own plain greedy decode token for token (checked: exit 1 otherwise).

Per side and round: the best step over 48 greedy steps after a prompt, CPU and wall time (with
more than one thread the wall time is the figure: CPU time adds the threads up); the k-row pass (5 rows
over 1, the engine's own verify-cost curve); and on the first request of each category of
lab/data/workload_fresh.jsonl (48 tokens, greedy, end of generation ignored), the ``auto`` draft's
speculative decode against plain decode, CPU time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from lab.gguf_head_probe import Q8_0, Rows, build_kernel, pack16_q8
from lab.gguf_kernel_probe import BLOCK, quantize_rows, require_cpu
from lab.provenance import print_and_save, record

Q8_0_TYPE = 8  # ggml's type id
KERNEL_ROWS = 8  # the probe kernel takes up to 8 activation rows a call
FRESH = Path(__file__).resolve().parent / "data" / "workload_fresh.jsonl"


class PackedHead:
    """``x [T, K] -> logits [T, V]`` on the packed Q8_0 tile (the engine's ``Matmul`` seam),
    ``threads`` threads each on a range of 16-row tiles (ctypes lets go of the GIL during a call;
    each output element is one thread's, so any split gives the same bits)."""

    def __init__(self, kernel: Any, blocks: npt.NDArray[Any], threads: int = 1) -> None:
        self.kernel = kernel
        self.n_out, nb = blocks.shape
        self.n_in = nb * BLOCK
        if self.n_out % 16:
            raise ValueError(f"the tile needs a multiple of 16 rows, not {self.n_out}")
        self.tiles = pack16_q8(blocks)
        tiles = self.n_out // 16
        cuts = [16 * (tiles * i // threads) for i in range(threads + 1)]
        self.ranges = [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]  # output rows of each thread
        self.pool = ThreadPoolExecutor(len(self.ranges) - 1) if len(self.ranges) > 1 else None

    def _run(self, first: int, last: int, a: Rows, part: npt.NDArray[np.float32]) -> None:
        offset = first * (self.n_in // BLOCK) * 34  # bytes of the tiles before row ``first``
        self.kernel(
            self.tiles.ctypes.data + offset,
            last - first,
            self.n_in,
            a.levels.ctypes.data,
            a.sums.ctypes.data,
            a.scales.ctypes.data,
            a.rows,
            part.ctypes.data + 4 * first,
            self.n_out,
        )

    def __call__(self, x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        rows = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, self.n_in)
        out = np.empty((rows.shape[0], self.n_out), dtype=np.float32)
        for start in range(0, rows.shape[0], KERNEL_ROWS):  # rows are independent: any grouping, the same bits
            a = Rows(quantize_rows(rows[start : start + KERNEL_ROWS]))
            part = out[start : start + a.rows]
            others = [self.pool.submit(self._run, lo, hi, a, part) for lo, hi in self.ranges[1:]] if self.pool else []
            self._run(*self.ranges[0], a, part)
            for done in others:
                done.result()
        return out


def check_threads(head: PackedHead) -> None:
    """The head's logits on its threads are those of one thread, bit for bit (1, 3 and 8 rows)."""
    single = PackedHead.__new__(PackedHead)
    single.__dict__.update(head.__dict__)
    single.ranges, single.pool = [(0, head.n_out)], None
    rng = np.random.default_rng(1)
    for rows in (1, 3, 8):
        x = rng.standard_normal((rows, head.n_in)).astype(np.float32)
        if not np.array_equal(head(x), single(x)):
            raise SystemExit(f"the packed head on {len(head.ranges)} threads differs from one thread ({rows} rows)")


def head_blocks(path: str, n_vocab: int, n_embd: int) -> npt.NDArray[Any]:
    """The file's Q8_0 head (the output matrix, or the tied embedding) as ``[V, n_embd / 32]`` blocks."""
    from verispec.reference.gguf import GGUFFile

    with GGUFFile.open(path) as f:
        name = "output.weight" if "output.weight" in f.tensors else "token_embd.weight"
        if f.tensors[name].ggml_type != Q8_0_TYPE:
            raise SystemExit(f"{name} is ggml type {f.tensors[name].ggml_type}, not Q8_0: the probe kernel is Q8_0's")
        raw = np.array(f.raw(name), dtype=np.uint8)  # a copy: the mapping closes with the file
    return raw.view(Q8_0).reshape(n_vocab, n_embd // BLOCK)


def child(path: str, side: str, folder: str) -> dict[str, Any]:
    from verispec.engine.model import FastModel

    model = FastModel.load(path, weights="int8")
    if side == "packed":
        cfg = model.config
        threads = int(os.environ.get("VERISPEC_THREADS", "1"))
        head = PackedHead(build_kernel(Path(folder)), head_blocks(path, cfg.n_vocab, cfg.n_embd), threads)
        check_threads(head)
        model.store._output = head
    prompt = np.arange(100, 132, dtype=np.int64) % model.config.n_vocab
    cache = model.new_cache(256)
    token = int(model.forward(prompt, cache, last_only=True).logits[-1].argmax())
    cpu, wall = [], []
    for _ in range(48):
        clock, started = time.process_time(), time.perf_counter()
        token = int(model.forward([token], cache, last_only=True).logits[-1].argmax())
        cpu.append(time.process_time() - clock)
        wall.append(time.perf_counter() - started)
    curve = model.verify_cost_curve(5)
    return {"step_cpu_best_ms": min(cpu) * 1e3, "step_cpu_median_ms": statistics.median(cpu) * 1e3,
            "step_wall_best_ms": min(wall) * 1e3, "rows_5_over_1": curve[5], **speculation(model, path)}  # fmt: skip


def speculation(model: Any, path: str) -> dict[str, Any]:
    """``auto`` against plain, greedy, the first request of each category: CPU ratio, and whether
    every speculative decode gave the plain decode's tokens."""
    from verispec.engine import sampling as fast_sampling
    from verispec.engine.generate import generate as fast_generate
    from verispec.reference.chat import ChatMessage, chat_format
    from verispec.reference.decode import SpeculativeOptions, speculative_generate
    from verispec.reference.drafts import make_draft, parse_draft_spec
    from verispec.reference.generate import GenerationRequest
    from verispec.reference.gguf import GGUFFile
    from verispec.reference.sampling import SamplingParams
    from verispec.reference.tokenizer import Tokenizer

    with GGUFFile.open(path) as f:
        tokenizer, chat = Tokenizer.from_gguf(f.metadata), chat_format(f.metadata)
    items, seen = [], set()
    for line in FRESH.read_text().splitlines():
        item = json.loads(line)
        if item["category"] not in seen:
            seen.add(item["category"])
            items.append(item)
    plain_s = spec_s = 0.0
    same = True
    for item in items:
        text = chat.render([ChatMessage(m["role"], m["content"]) for m in item["messages"]])
        ids = tuple(tokenizer.encode(text, add_bos=tokenizer.add_bos, parse_special=True))
        request = GenerationRequest(ids, params=SamplingParams(temperature=0.0), max_tokens=48, seed=0, ignore_eog=True)
        clock = time.process_time()
        plain = fast_generate(model, tokenizer, request)
        plain_s += time.process_time() - clock
        draft = make_draft(parse_draft_spec("auto"), model, tokenizer)
        clock = time.process_time()
        spec = speculative_generate(
            model, tokenizer, request, draft, SpeculativeOptions(k=6, adaptive=True),
            law=fast_sampling.target_distribution, draw=fast_sampling.sample,
        )  # fmt: skip
        spec_s += time.process_time() - clock
        same = same and spec.generation.ids == plain.ids
    return {"auto_over_plain_cpu": plain_s / spec_s, "speculation_same_tokens": same}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    parser.add_argument("--child", choices=("mlas", "packed"), help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.model, args.child, args.folder)))
        return
    require_cpu()
    from verispec.registry import resolve_model

    path = args.model if Path(args.model).exists() else str(resolve_model(args.model))
    load_start = os.getloadavg()[0]
    runs: dict[str, list[dict[str, Any]]] = {"mlas": [], "packed": []}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.rounds):
            for side in runs:
                command = [sys.executable, "-m", "lab.packed_head_ab", path, "--child", side, "--folder", folder]
                done = subprocess.run(command, capture_output=True, text=True, check=True)
                runs[side].append(json.loads(done.stdout.strip().splitlines()[-1]))
    same = all(r["speculation_same_tokens"] for rs in runs.values() for r in rs)
    median = {
        side: {k: statistics.median(r[k] for r in rs) for k in rs[0] if k != "speculation_same_tokens"}
        for side, rs in runs.items()
    }
    results: dict[str, Any] = {
        "model": Path(path).name,
        "threads": os.environ.get("VERISPEC_THREADS", "1"),
        "step_mlas_over_packed": median["mlas"]["step_cpu_best_ms"] / median["packed"]["step_cpu_best_ms"],
        "step_wall_mlas_over_packed": median["mlas"]["step_wall_best_ms"] / median["packed"]["step_wall_best_ms"],
        "rows_5_over_1_mlas": median["mlas"]["rows_5_over_1"],
        "rows_5_over_1_packed": median["packed"]["rows_5_over_1"],
        "auto_over_plain_mlas": median["mlas"]["auto_over_plain_cpu"],
        "auto_over_plain_packed": median["packed"]["auto_over_plain_cpu"],
        "speculation_same_tokens_as_plain": same,
        "runs": runs,
        "provenance": record("lab.packed_head_ab", load_start),
    }
    print_and_save(results, args.json)
    if not same:
        raise SystemExit("a speculative decode differed from its own plain greedy decode")


if __name__ == "__main__":
    main()
