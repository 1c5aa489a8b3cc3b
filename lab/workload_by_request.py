"""The bench's workload measurement, one JSON line per request as each ends (for long runs on a
shared machine, where a whole `verispec bench --workload` may not finish in the time there is).

    python -m lab.workload_by_request MODEL PER_CATEGORY TEMPS K DRAFTS
    e.g. ... gemma3-270m 1 0,0.8 12 suffix,suffix:tree > runs.jsonl

Each line is what `verispec bench --workload` records per request (verispec.bench.speculative.speculative_vs_plain:
plain then speculative decoding of the same request on the fast engine, the speedup in wall and
process-CPU time, alpha, alpha per position, tokens per pass, tree shape, same tokens as plain), plus
the draft, category and id.
"""

from __future__ import annotations

import json
import sys

from verispec.bench.options import BenchOptions
from verispec.bench.speculative import speculative_vs_plain
from verispec.engine.model import FastModel
from verispec.reference.chat import chat_format
from verispec.reference.generate import GenerationRequest
from verispec.reference.gguf import GGUFFile
from verispec.reference.sampling import SamplingParams
from verispec.reference.tokenizer import Tokenizer
from verispec.registry import resolve_model
from verispec.workload import load_workload, select


def main(name: str, per: str, temps: str, k: str, drafts: str) -> None:
    with GGUFFile.open(resolve_model(name)) as f:
        model, tok, chat = FastModel.load(f), Tokenizer.from_gguf(f.metadata), chat_format(f.metadata)
    end = tok.token_id(chat.end_of_turn)
    options = BenchOptions(k=int(k), repeats=1)
    for temperature in (float(t) for t in temps.split(",")):
        for item in select(load_workload(), None, int(per)):
            ids = tuple(tok.encode(item.prompt_text(chat), add_bos=tok.add_bos, parse_special=True))
            request = GenerationRequest(
                ids,
                params=SamplingParams(temperature=temperature),
                max_tokens=item.max_tokens,
                stop_ids=frozenset() if end is None else frozenset({end}),
                seed=options.seed,
            )
            for draft in drafts.split(","):
                run = speculative_vs_plain(model, tok, draft, request, options)
                print(
                    json.dumps(
                        {"draft": draft, "category": item.category, "id": item.id, "prompt_tokens": len(ids), **run}
                    ),
                    flush=True,
                )


if __name__ == "__main__":
    main(*sys.argv[1:6])
