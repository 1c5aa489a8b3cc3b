"""Evidence for a speculative run: what was drafted, what was kept, and what it bought.

:func:`measure` runs the same request twice in one process — plain decoding, then speculative —
so the speedup is a ratio of two measurements taken side by side, not a guess. Every field of
:class:`Evidence` (the ``"speculative"`` object of ``verispec generate --json``):

    acceptance_rate          accepted drafts / drafted tokens (alpha)
    accepted_per_pass        accepted drafts per target pass
    tokens_per_pass          committed tokens per target pass (the accepted length + 1 on average)
    per_position_acceptance  [i]: P(draft i accepted | a draft i was proposed); a token tree: P(the
                             accepted path reaches depth i + 1 | the tree reaches depth i + 1)
    tree_shape               token trees only (else None): mean drafted nodes, mean depth and
                             mean / max width (most candidates at one position) per drafting cycle
    target_passes            verification passes + plain steps (= cycles)
    draft_passes             draft forward passes (ngram: 0)
    ttft_s, tpot_s, tokens_per_s            the speculative run
    plain_tokens_per_s, plain_tpot_s        plain decoding of the same request, same process
    measured_speedup         tokens_per_s / plain_tokens_per_s
    draft_cost_ratio         c = mean draft pass time / plain tpot (one target pass)
    predicted_speedup        (1 - a^(k+1)) / ((1 - a)(1 + c k)), a = alpha, k = drafts per cycle
                             (Leviathan et al.: assumes a k+1-token verification costs one plain pass)
    verify_cost_ratio        mean verification time of drafting cycles / plain tpot: how far that
                             assumption is off on this engine (a gap between predicted and measured)
    matches_plain            greedy only: the token ids are identical (None when sampling)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from verispec.reference.decode import SpeculativeOptions, SpeculativeResult, speculative_generate
from verispec.reference.drafts import predicted_speedup
from verispec.reference.generate import GenerationRequest, GenerationResult, generate
from verispec.reference.sampling import sample, target_distribution
from verispec.reference.seams import DraftSource, DrawFn, LawFn, TargetModel
from verispec.reference.tokenizer import Tokenizer


@dataclass(frozen=True)
class Evidence:
    draft: str
    mode: str
    k: int
    adaptive: bool
    p_min: float
    cycles: int
    drafting_cycles: int
    drafted: int
    accepted: int
    acceptance_rate: float
    accepted_per_pass: float
    tokens_per_pass: float
    per_position_acceptance: list[float]
    target_passes: int
    draft_passes: int
    ttft_s: float
    tpot_s: float
    tokens_per_s: float
    plain_tokens_per_s: float | None
    plain_tpot_s: float | None
    measured_speedup: float | None
    draft_cost_ratio: float | None
    predicted_speedup: float | None
    verify_cost_ratio: float | None
    matches_plain: bool | None
    trace: list[dict[str, object]] | None = None
    tree_shape: dict[str, float] | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def evidence(result: SpeculativeResult, plain: GenerationResult | None = None, *, trace: bool = False) -> Evidence:
    """Aggregate a speculative run (and, when given, the plain run of the same request)."""
    cycles = result.cycles
    drafted = sum(len(c.drafted) for c in cycles)
    accepted = sum(c.accepted for c in cycles)
    drafting = [c for c in cycles if c.drafted]
    depth = max((c.depth for c in cycles), default=0)
    per_position = [
        sum(1 for c in cycles if c.accepted > i) / n
        for i in range(depth)
        if (n := sum(1 for c in cycles if c.depth > i))
    ]
    trees = [c for c in drafting if c.parents is not None]
    tree_shape = (
        None
        if not trees
        else {
            "nodes": sum(len(c.drafted) for c in trees) / len(trees),
            "depth": sum(c.depth for c in trees) / len(trees),
            "width": sum(c.width for c in trees) / len(trees),
            "max_width": float(max(c.width for c in trees)),
        }
    )
    passes = len(cycles)
    stats = result.generation.stats
    alpha = accepted / drafted if drafted else 0.0

    plain_tps = plain.stats.tokens_per_s if plain is not None else None
    plain_tpot = plain.stats.tpot_s if plain is not None and plain.stats.tpot_s > 0 else None
    speedup = stats.tokens_per_s / plain_tps if plain_tps else None
    cost = None
    predicted = None
    if plain_tpot is not None:
        cost = (result.draft_time_s / result.draft_passes / plain_tpot) if result.draft_passes else 0.0
        k_mean = drafted / passes if passes else 0.0
        predicted = predicted_speedup(alpha, k_mean, cost)
    verify = None
    if plain_tpot is not None and drafting:
        verify = sum(c.verify_s for c in drafting) / len(drafting) / plain_tpot
    matches = None
    if plain is not None and result.mode == "greedy":
        matches = plain.ids == result.generation.ids
    return Evidence(
        draft=result.draft,
        mode=result.mode,
        k=result.options.k,
        adaptive=result.options.adaptive,
        p_min=result.options.p_min,
        cycles=passes,
        drafting_cycles=len(drafting),
        drafted=drafted,
        accepted=accepted,
        acceptance_rate=alpha,
        accepted_per_pass=accepted / passes if passes else 0.0,
        tokens_per_pass=stats.generated_tokens / passes if passes else 0.0,
        per_position_acceptance=per_position,
        target_passes=passes,
        draft_passes=result.draft_passes,
        ttft_s=stats.ttft_s,
        tpot_s=stats.tpot_s,
        tokens_per_s=stats.tokens_per_s,
        plain_tokens_per_s=plain_tps,
        plain_tpot_s=plain_tpot,
        measured_speedup=speedup,
        draft_cost_ratio=cost,
        predicted_speedup=predicted,
        verify_cost_ratio=verify,
        matches_plain=matches,
        trace=[c.as_dict() for c in cycles] if trace else None,
        tree_shape=tree_shape,
    )


def measure(
    model: TargetModel,
    tokenizer: Tokenizer,
    request: GenerationRequest,
    draft: DraftSource,
    options: SpeculativeOptions,
    *,
    trace: bool = False,
    on_text: Callable[[str], None] | None = None,
    plain: Callable[[GenerationRequest], GenerationResult] | None = None,
    law: LawFn = target_distribution,
    draw: DrawFn = sample,
) -> tuple[SpeculativeResult, Evidence]:
    """Plain decoding then speculative decoding of ``request`` in this process; the speculative
    result and its evidence (speedup measured against the plain run just made).

    Both runs must be on the same engine, or the speedup compares two engines: ``plain`` is that
    engine's plain loop for ``request`` (default :func:`reference.generate.generate` on ``model``)
    and ``law`` / ``draw`` its target law and draw (bit-identical on every engine; only their speed
    differs). The CLI passes the chosen engine's (:func:`engine.generate.generate_any`, ``law_for``
    and ``draw_for``), as ``verispec bench`` does.
    """
    options.validate()
    plain_result = plain(request) if plain is not None else generate(model, tokenizer, request)
    result = speculative_generate(model, tokenizer, request, draft, options, on_text=on_text, law=law, draw=draw)
    return result, evidence(result, plain_result, trace=trace)
