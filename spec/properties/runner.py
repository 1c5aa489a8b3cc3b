"""The property table and the runner: ``run_properties(verifier) -> results``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from typing import Any

import numpy as np
import numpy.typing as npt

from verispec.reference.speculative import BatchVerifier, Verifier, verify_sampled, verify_sampled_batch
from verispec.spec.llm_properties import (  # LLM scale: V up to 262,144 (full_vocab_*, stat_strata_*)
    LLM_EXACT,
    LLM_STATISTICS,
)
from verispec.spec.pipeline import Pipeline, ReferencePipeline
from verispec.spec.properties.deterministic import (
    prop_batch_matches_sequential,
    prop_contract,
    prop_exact_lossless,
    prop_protocol_boundaries,
    prop_protocol_cells,
    prop_range_and_mass,
)
from verispec.spec.properties.processors import prop_pipeline_processors
from verispec.spec.properties.statistical import lossless_design, stat_lossless, stat_verdict_law, verdict_law_design
from verispec.spec.sequential import StatDesign
from verispec.spec.statistics import ALPHA_BUDGET, PROPERTY_SEED
from verispec.spec.subject import Property, PropertyResult, Subject, as_batch

PROPERTIES: tuple[tuple[str, Property], ...] = (
    ("contract", prop_contract),
    ("range_and_mass", prop_range_and_mass),
    ("pipeline_processors", prop_pipeline_processors),
    ("protocol_boundaries", prop_protocol_boundaries),
    ("protocol_cells", prop_protocol_cells),
    ("exact_lossless", prop_exact_lossless),
    ("batch_matches_sequential", prop_batch_matches_sequential),
    *LLM_EXACT,
    ("stat_verdict_law_k1", stat_verdict_law(1)),
    ("stat_verdict_law_k2", stat_verdict_law(2)),
    ("stat_verdict_law_k3", stat_verdict_law(3)),
    ("stat_verdict_law_k5", stat_verdict_law(5)),
    ("stat_verdict_law_k8", stat_verdict_law(8)),
    ("stat_lossless_ar_k1", stat_lossless(1)),
    ("stat_lossless_ar_k2", stat_lossless(2)),
    ("stat_lossless_ar_k4", stat_lossless(4)),
    ("stat_lossless_processed_k3", stat_lossless(3, processed=True)),
) + LLM_STATISTICS
PROPERTY_NAMES: tuple[str, ...] = tuple(name for name, _ in PROPERTIES)
STATISTICAL: frozenset[str] = frozenset(name for name in PROPERTY_NAMES if name.startswith("stat_"))


def strata_design(name: str) -> StatDesign:
    """A stratified LLM-scale test of :mod:`spec.strata` as a design: cells (accepted, stratum),
    designed against ``strata.design_tv(name)`` (``STRATA_TV``; 0.1 at V = 262,144, for cost)."""
    from verispec.spec import strata

    p, q = strata.rows_for(name)

    def draw(batch: BatchVerifier, rng: np.random.Generator, n: int) -> npt.NDArray[np.int64]:
        return strata.observe(batch, p, q, n, rng)

    label = f" V={p.shape[1]} k={q.shape[0]} (strata)"
    return StatDesign(
        name, strata.cell_law(p, q), strata.design_df(p, q), strata.design_tv(name), ALPHA_BUDGET[name], draw, label
    )


# every statistical property as a design (spec/sequential.py runs them group-sequentially)
STAT_DESIGNS: dict[str, Callable[[], StatDesign]] = {
    **{f"stat_verdict_law_k{k}": functools.partial(verdict_law_design, k) for k in (1, 2, 3, 5, 8)},
    **{f"stat_lossless_ar_k{k}": functools.partial(lossless_design, k) for k in (1, 2, 4)},
    "stat_lossless_processed_k3": functools.partial(lossless_design, 3, processed=True),
    **{name: functools.partial(strata_design, name) for name, _ in LLM_STATISTICS},
}


def run_properties(
    verifier: Verifier,
    batch: BatchVerifier | None = None,
    pipeline: Pipeline | None = None,
    *,
    only: Collection[str] | None = None,
    fail_fast: bool = False,
    scale: float = 1.0,
    seed: int = PROPERTY_SEED,
    own_randomness: bool = False,
) -> list[PropertyResult]:
    """Run the spec's properties against an implementation; one result per property run.

    ``batch`` defaults to ``verifier`` lifted (a loop), ``pipeline`` to :class:`ReferencePipeline`.
    ``only`` selects properties by name; ``fail_fast`` stops at the first failure; ``scale``
    multiplies the statistical sample sizes (the reported power follows); ``own_randomness``: the
    verifier draws its own randomness (the uniforms' part of the contract is not checked).
    """
    unknown = set(only or ()) - set(PROPERTY_NAMES)
    if unknown:
        raise ValueError(f"unknown properties {sorted(unknown)}; known: {', '.join(PROPERTY_NAMES)}")
    subject = Subject(
        verifier=verifier,
        batch=batch if batch is not None else as_batch(verifier),
        pipeline=pipeline if pipeline is not None else ReferencePipeline(),
        scale=scale,
        seed=seed,
        own_randomness=own_randomness,
    )
    results: list[PropertyResult] = []
    for name, prop in PROPERTIES:
        if only is not None and name not in only:
            continue
        try:
            result = prop(subject)
        except Exception as exc:  # noqa: BLE001 - a broken subject must not crash the runner
            result = PropertyResult(
                name, False, 0, ALPHA_BUDGET.get(name, 0.0), 0.0, f"raised {type(exc).__name__}: {exc}"
            )
        results.append(result)
        if fail_fast and not result.passed:
            break
    return results


def reference_results(**kwargs: Any) -> list[PropertyResult]:
    """:func:`run_properties` on the reference verifier (single and batch forms)."""
    return run_properties(verify_sampled, verify_sampled_batch, ReferencePipeline(), **kwargs)
