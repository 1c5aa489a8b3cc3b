"""The spec's properties, runnable against ANY verifier: ``run_properties(verifier) -> results``.

A verifier under test is given as a :class:`~reference.speculative.Verifier` (one verification),
optionally a :class:`~reference.speculative.BatchVerifier` (N at once, for cheap statistics; lifted
from the single form when absent) and optionally a :class:`~spec.pipeline.Pipeline` (how p and q
rows are computed from logits; the reference's by default). ``spec.mutants`` runs every broken
verifier through this; ``verispec check`` runs external implementations through it.

Properties, cheapest first (deterministic ones have alpha 0 and power 1):

- ``contract``: malformed inputs raise VerificationError, valid ones do not.
- ``range_and_mass``: 0 <= accepted <= k, kind is bonus iff accepted == k, token < V with positive
  mass in the law it was drawn from, accepted drafts have positive target mass; on random rows and
  on edge rows (subnormal draft mass, rows summing to 1 - 1e-9, V not a multiple of 8).
- ``pipeline_processors``: toy autoregressive logits models with processors (top-k, top-p, min-p,
  temperature, logit bias, repetition penalty, greedy draft, greedy target): the exact law of the
  first 2 emitted tokens, with the pipeline's rows and the verifier's implied law (see
  ``protocol_cells``), equals the
  processed target law (within 1e-9 TV: float rows sum to 1 only to rounding).
- ``protocol_boundaries``: dyadic rows and uniforms, many ON the protocol's boundaries
  (u * q(x) == p(x), u * total == cumsum); every float64 step is then exact, so the verdict must
  equal the exact protocol's (:func:`spec.exact.protocol_verdict`) bit for bit.
- ``protocol_cells``: for small rows, the unit cube of uniforms splits into cells on which the
  protocol's verdict is constant; the verifier is evaluated at every cell's midpoint and must give
  the cell's verdict. Weighting by the cells' exact volumes gives the verifier's implied law.
- ``exact_lossless``: that implied law, over all draft paths, completed with target draws, equals
  the product of the target rows EXACTLY (Fractions), for rows with zeros, ties, one-hot rows,
  p == q and disjoint supports.
- ``batch_matches_sequential``: the batch form equals the single form item by item.
- ``stat_*``: chi-square tests of the verifier's real draws against exact laws
  (:mod:`spec.statistics`): the verdict law for k = 1, 2, 3, 5, 8 with position-dependent rows,
  and the first-3-token law of autoregressive toys for k = 1, 2, 4 and a processed one for k = 3.
  N from the power analysis (TV bias 0.005 detected with power 0.99), alpha from the budget table.

The package, one concept a module (this ``__init__`` only re-exports, with ``__all__``):

- :mod:`.cases`: the cases' dyadic rows and draft paths; how a property calls the verifier and
  counts its failures.
- :mod:`.deterministic`: ``contract`` .. ``batch_matches_sequential`` (alpha 0, power 1) and the
  implied law on the protocol's cells.
- :mod:`.processors`: ``pipeline_processors``: toy logits models through the pipeline, exact.
- :mod:`.statistical`: the ``stat_*`` designs: the verdict law and the lossless law of Markov toys.
- :mod:`.runner`: the table of every property (LLM-scale ones from :mod:`spec.llm_properties`),
  the statistical designs by name, and ``run_properties``.
"""

from __future__ import annotations

from verispec.spec.pipeline import Pipeline, ReferencePipeline
from verispec.spec.properties.cases import LISTED_FAILURES, MAX_FAILURES, SHAPES, draw_drafts, dyadic_row, small_case
from verispec.spec.properties.deterministic import (
    ImpliedLaw,
    implied_verdict_law,
    prop_batch_matches_sequential,
    prop_contract,
    prop_exact_lossless,
    prop_protocol_boundaries,
    prop_protocol_cells,
    prop_range_and_mass,
)
from verispec.spec.properties.processors import (
    PIPELINE_TOLERANCE,
    PROCESSOR_SCENARIOS,
    LogitsModel,
    ProcessorScenario,
    pipeline_law,
    prop_pipeline_processors,
)
from verispec.spec.properties.runner import (
    PROPERTIES,
    PROPERTY_NAMES,
    STAT_DESIGNS,
    STATISTICAL,
    reference_results,
    run_properties,
    strata_design,
)
from verispec.spec.properties.statistical import (
    MarkovToy,
    StatOutcome,
    lossless_design,
    markov_toy,
    simulate_first_tokens,
    verdict_law_design,
    verdict_law_rows,
)
from verispec.spec.subject import Property, PropertyResult, Subject, as_batch, as_verifier

__all__ = [
    "ImpliedLaw",
    "LISTED_FAILURES",
    "LogitsModel",
    "MAX_FAILURES",
    "MarkovToy",
    "PIPELINE_TOLERANCE",
    "PROCESSOR_SCENARIOS",
    "PROPERTIES",
    "PROPERTY_NAMES",
    "Pipeline",
    "ProcessorScenario",
    "Property",
    "PropertyResult",
    "ReferencePipeline",
    "SHAPES",
    "STATISTICAL",
    "STAT_DESIGNS",
    "StatOutcome",
    "Subject",
    "as_batch",
    "as_verifier",
    "draw_drafts",
    "dyadic_row",
    "implied_verdict_law",
    "lossless_design",
    "markov_toy",
    "pipeline_law",
    "prop_batch_matches_sequential",
    "prop_contract",
    "prop_exact_lossless",
    "prop_pipeline_processors",
    "prop_protocol_boundaries",
    "prop_protocol_cells",
    "prop_range_and_mass",
    "reference_results",
    "run_properties",
    "simulate_first_tokens",
    "small_case",
    "strata_design",
    "verdict_law_design",
    "verdict_law_rows",
]
