"""The bench's speculative section: lossless speculative decoding against plain decoding of the
same request on the same engine, per draft source and prompt, and the verify-cost curve.

Speculative decoding runs :func:`reference.decode.speculative_generate` on the engine with the
engine's bit-identical law; plain decoding is the engine's own. Each request alternates the two
``repeats`` times and keeps each side's least-disturbed run (the machine is shared: only ratios
within one run mean anything).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from verispec.bench.means import geomean
from verispec.bench.options import PROMPT_KINDS_FAST, BenchOptions
from verispec.bench.report import Speculative, SpeculativeRun, SpeculativeSummary, VerifyCost
from verispec.engine import sampling as fast_sampling
from verispec.engine.generate import generate as fast_generate
from verispec.engine.model import FastModel
from verispec.reference.decode import SpeculativeOptions, SpeculativeResult, speculative_generate
from verispec.reference.drafts import best_k_for_cost, make_draft, parse_draft_spec
from verispec.reference.evidence import evidence
from verispec.reference.generate import GenerationRequest, GenerationResult
from verispec.reference.sampling import SamplingParams
from verispec.reference.tokenizer import Tokenizer

CAP_ALPHAS = (0.3, 0.5, 0.7, 0.9)  # acceptance rates the verify-cost section shows --adaptive's k cap at


def speculative_section(model: FastModel, tokenizer: Tokenizer, options: BenchOptions) -> Speculative:
    """Per draft source: every prompt greedy, the first prompt sampled, and their geometric means."""
    out: Speculative = {}
    for spec_text in options.drafts:
        runs = [
            SpeculativeRun(prompt=kind, **speculative_vs_plain(model, tokenizer, spec_text, request, options))
            for kind, request in _requests(tokenizer, options)
        ]
        out[spec_text] = summarise(runs)
    return out


def _requests(tokenizer: Tokenizer, options: BenchOptions) -> list[tuple[str, GenerationRequest]]:
    """(kind, request): every prompt greedy, then the first at ``sampled_temperature``."""
    out = []
    for temperature, prompts in ((0.0, options.prompts), (options.sampled_temperature, options.prompts[:1])):
        for kind, text in prompts:
            ids = tuple(tokenizer.encode(text, add_bos=tokenizer.add_bos, parse_special=True))
            params = SamplingParams(temperature=temperature)
            out.append(
                (kind, GenerationRequest(ids, params=params, max_tokens=options.decode_tokens, seed=options.seed))
            )
    return out


def summarise(runs: list[SpeculativeRun]) -> SpeculativeSummary:
    """Geometric means over the greedy runs, the structured/repetitive ones, and the sampled ones."""
    greedy = [r.speedup for r in runs if r.temperature == 0.0]
    fast = [r.speedup for r in runs if r.temperature == 0.0 and r.prompt in PROMPT_KINDS_FAST]
    sampled = [r.speedup for r in runs if r.temperature != 0.0]
    return SpeculativeSummary(runs, geomean(greedy), min(greedy) if greedy else 0.0, geomean(fast), geomean(sampled))


def speculative_vs_plain(
    model: FastModel, tokenizer: Tokenizer, spec_text: str, request: GenerationRequest, options: BenchOptions
) -> dict[str, Any]:
    """One request decoded plain and speculatively with a fresh ``spec_text`` draft, alternating
    ``options.repeats`` times (best tok/s of each kept): speedup and its evidence."""
    return speculative_vs_plain_ids(model, tokenizer, spec_text, request, options)[0]


def speculative_vs_plain_ids(
    model: FastModel, tokenizer: Tokenizer, spec_text: str, request: GenerationRequest, options: BenchOptions
) -> tuple[dict[str, Any], tuple[int, ...]]:
    """:func:`speculative_vs_plain`, and the plain decode's generated ids (the engine's side of the
    engine-vs-llama.cpp same-tokens note)."""
    rounds = [engine_round(model, tokenizer, spec_text, request, options) for _ in range(max(1, options.repeats))]
    return rounds_summary(rounds)


@dataclass(frozen=True)
class Round:
    """One plain decode then one speculative decode of the same request, back to back, with the
    process CPU seconds of each."""

    temperature: float
    plain: GenerationResult
    speculative: SpeculativeResult
    plain_cpu_s: float
    speculative_cpu_s: float


def engine_round(
    model: FastModel, tokenizer: Tokenizer, spec_text: str, request: GenerationRequest, options: BenchOptions
) -> Round:
    """``request`` decoded plain, then speculatively with a fresh ``spec_text`` draft (adaptive k
    up to ``options.k``, the engine's bit-identical law)."""
    c0 = time.process_time()
    plain = fast_generate(model, tokenizer, request)
    c1 = time.process_time()
    draft = make_draft(parse_draft_spec(spec_text), model, tokenizer)
    spec = speculative_generate(
        model,
        tokenizer,
        request,
        draft,
        SpeculativeOptions(k=options.k, adaptive=True),
        law=fast_sampling.target_distribution,
        draw=fast_sampling.sample,
    )
    c2 = time.process_time()
    return Round(request.params.temperature, plain, spec, c1 - c0, c2 - c1)


def rounds_summary(rounds: Sequence[Round]) -> tuple[dict[str, Any], tuple[int, ...]]:
    """The rounds of one request and draft: each side's least-disturbed run (best tok/s, least CPU),
    the speedup and its evidence (the last round's trace), and the plain decode's ids."""
    if not rounds:
        raise ValueError("rounds_summary needs at least one round")
    last = rounds[-1]
    plain, spec = last.plain, last.speculative
    temperature = last.temperature
    plain_tok_s = max(r.plain.stats.tokens_per_s for r in rounds)
    spec_tok_s = max(r.speculative.generation.stats.tokens_per_s for r in rounds)
    plain_cpu = min(r.plain_cpu_s for r in rounds)
    spec_cpu = min(r.speculative_cpu_s for r in rounds)
    ev = evidence(spec, plain)
    plain_tokens, spec_tokens = plain.stats.generated_tokens, spec.generation.stats.generated_tokens
    return {
        "temperature": temperature,
        "plain_tok_s": plain_tok_s,
        "speculative_tok_s": spec_tok_s,
        "speedup": spec_tok_s / plain_tok_s if plain_tok_s > 0 else 0.0,
        "speedup_cpu": _cpu_speedup(plain_cpu, plain_tokens, spec_cpu, spec_tokens),
        "alpha": ev.acceptance_rate,
        "tokens_per_pass": ev.tokens_per_pass,
        "per_position_acceptance": list(ev.per_position_acceptance),
        "tree_shape": ev.tree_shape,  # token-tree drafts (suffix:tree): nodes, depth, width per cycle
        "generated_tokens": spec_tokens,
        # greedy: lossless means the same tokens; sampled: the same law, not the same draws
        "same_tokens_as_plain": (list(spec.generation.ids) == list(plain.ids)) if temperature == 0.0 else None,
    }, tuple(plain.ids)


def _cpu_speedup(plain_cpu: float, plain_tokens: int, spec_cpu: float, spec_tokens: int) -> float:
    """The speedup in process CPU time per generated token (single-threaded BLAS: the work done,
    whatever the load; equal token counts on both sides for greedy runs); 0.0 when unmeasured."""
    if spec_cpu <= 0 or plain_cpu <= 0:
        return 0.0
    return (plain_cpu / max(1, plain_tokens)) / (spec_cpu / max(1, spec_tokens))


def verify_cost(model: FastModel, k: int) -> VerifyCost:
    """The verify-cost curve ``--adaptive`` caps k with (engine/verify_cost.py, measured on the
    model's forward) and the cap it gives at a few acceptance rates."""
    curve = model.verify_cost_curve(k + 1)
    return VerifyCost({str(r): c for r, c in curve.items()}, {str(a): best_k_for_cost(a, curve, k) for a in CAP_ALPHAS})
