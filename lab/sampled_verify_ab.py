"""A/B in one process: sampled speculation with the eager verifier (every target row's law
computed, then verified) against the lazy one the decode loop uses (only the rows verification
reads: reference/speculative.py ``verify_drafts_sampled``), each beside plain decoding of the same
request.

    python -m lab.sampled_verify_ab MODEL DRAFT ROUNDS ID[,ID...] [TEMPERATURE]
    e.g. python -m lab.sampled_verify_ab smollm2-135m suffix 2 summarisation-1,rag-1,code_edit-1

Every request is decoded to the length of the engine's greedy answer with end of generation
ignored (as ``bench --workload`` does), at T = 0.8 by default, with the request's seed. Each round
runs plain, eager, lazy back to back (adaptive k, as the bench runs it); each keeps its least
process-CPU time (the steadier figure on a shared machine) and best wall rate. Adaptive k and the
suffix draft's cost model follow measured times, so two timed runs may draft differently and draw
different (equally lawful) outputs; the identity check is a separate run with ``ngram`` drafts at a
fixed k = 4, no timing in the loop: there the two verifiers see the same inputs and must give the
same tokens (a difference is a bug, exit 1). One JSON line per request, then the geometric means.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np

from verispec.bench.means import geomean
from verispec.engine import sampling as fast_sampling
from verispec.engine.generate import generate as fast_generate
from verispec.engine.model import FastModel
from verispec.reference import speculative
from verispec.reference.chat import chat_format
from verispec.reference.decode import SpeculativeOptions, speculative_generate
from verispec.reference.drafts import make_draft, parse_draft_spec
from verispec.reference.generate import GenerationRequest
from verispec.reference.gguf import GGUFFile
from verispec.reference.sampling import SamplingParams
from verispec.reference.tokenizer import Tokenizer
from verispec.registry import resolve_model
from verispec.workload import load_workload

LAZY = speculative.verify_drafts_sampled


def eager(
    target_logits: Any,
    history: Any,
    drafts: Any,
    q: Any,
    params: SamplingParams,
    uniforms: Any,
    law: Any = fast_sampling.target_distribution,
) -> speculative.Verdict:
    """Every row's law, then the protocol's verifier (what the loop did before)."""
    p = speculative.target_rows(target_logits, history, drafts, params, law)
    return speculative.verify_sampled(
        p, speculative.draft_law_rows(q, drafts, p.shape[-1]), drafts, np.asarray(uniforms).tolist()
    )


def _same_tokens_at_fixed_k(model: FastModel, tok: Tokenizer, request: GenerationRequest) -> bool:
    """ngram drafts, k = 4 fixed (no timing in the loop): the eager and the lazy verifier's outputs."""
    out = []
    for verifier in (eager, LAZY):
        speculative.verify_drafts_sampled = verifier
        try:
            spec = speculative_generate(
                model,
                tok,
                request,
                make_draft(parse_draft_spec("ngram"), model, tok),
                SpeculativeOptions(k=4, adaptive=False),
                law=fast_sampling.target_distribution,
            )
        finally:
            speculative.verify_drafts_sampled = LAZY
        out.append(tuple(spec.generation.ids))
    return out[0] == out[1]


def main(name: str, draft: str, rounds: str, ids: str, temperature: str = "0.8") -> int:
    with GGUFFile.open(resolve_model(name)) as f:
        model, tok, chat = FastModel.load(f, weights="int8"), Tokenizer.from_gguf(f.metadata), chat_format(f.metadata)
    end = tok.token_id(chat.end_of_turn)
    stop = frozenset() if end is None else frozenset({end})
    items = {i.id: i for i in load_workload()}
    ratios: dict[str, list[float]] = {
        "eager_over_plain_cpu": [],
        "lazy_over_plain_cpu": [],
        "lazy_over_eager_cpu": [],
        "eager_over_plain_wall": [],
        "lazy_over_plain_wall": [],
    }
    for rid in ids.split(","):
        item = items[rid]
        prompt = tuple(tok.encode(item.prompt_text(chat), add_bos=tok.add_bos, parse_special=True))
        greedy = GenerationRequest(
            prompt, params=SamplingParams(temperature=0.0), max_tokens=item.max_tokens, stop_ids=stop, seed=0
        )
        n = fast_generate(model, tok, greedy).stats.generated_tokens
        request = GenerationRequest(
            prompt,
            params=SamplingParams(temperature=float(temperature)),
            max_tokens=n,
            stop_ids=stop,
            seed=0,
            ignore_eog=True,
        )
        cpu = {"plain": float("inf"), "eager": float("inf"), "lazy": float("inf")}
        wall = {"plain": 0.0, "eager": 0.0, "lazy": 0.0}
        outputs: dict[str, tuple[int, ...]] = {}
        alpha: dict[str, float] = {}
        for _ in range(int(rounds)):
            for side in ("plain", "eager", "lazy"):
                c0 = time.process_time()
                if side == "plain":
                    result = fast_generate(model, tok, request)
                else:
                    speculative.verify_drafts_sampled = eager if side == "eager" else LAZY
                    try:
                        spec = speculative_generate(
                            model,
                            tok,
                            request,
                            make_draft(parse_draft_spec(draft), model, tok),
                            SpeculativeOptions(k=12, adaptive=True),
                            law=fast_sampling.target_distribution,
                        )
                    finally:
                        speculative.verify_drafts_sampled = LAZY
                    result = spec.generation
                    drafted = sum(len(c.drafted) for c in spec.cycles)
                    alpha[side] = sum(c.accepted for c in spec.cycles) / drafted if drafted else 0.0
                cpu[side] = min(cpu[side], time.process_time() - c0)
                wall[side] = max(wall[side], result.stats.tokens_per_s)
                assert result.stats.generated_tokens == n
                if side != "plain":
                    outputs.setdefault(side, tuple(result.ids))
        same = _same_tokens_at_fixed_k(model, tok, request)
        row = {
            "id": rid,
            "tokens": n,
            "draft": draft,
            "temperature": float(temperature),
            "eager_lazy_same_tokens_fixed_k": same,
            "timed_runs_same_tokens": outputs["eager"] == outputs["lazy"],
            "cpu_s": cpu,
            "wall_tok_s": wall,
            "alpha": alpha,
            "eager_over_plain_cpu": cpu["plain"] / cpu["eager"],
            "lazy_over_plain_cpu": cpu["plain"] / cpu["lazy"],
            "lazy_over_eager_cpu": cpu["eager"] / cpu["lazy"],
            "eager_over_plain_wall": wall["eager"] / wall["plain"],
            "lazy_over_plain_wall": wall["lazy"] / wall["plain"],
        }
        for key in ratios:
            ratios[key].append(float(row[key]))  # type: ignore[arg-type]
        print(json.dumps(row), flush=True)
        if not same:
            print("eager and lazy verification gave different tokens", file=sys.stderr)
            return 1
    print(json.dumps({"geomean": {k: geomean(v) for k, v in ratios.items()}}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:6]))
