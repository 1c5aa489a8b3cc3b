"""The properties' cases: dyadic rows (multiples of 2^-bits, so exact and float arithmetic agree),
draft paths drawn from them, and how a property calls the verifier and counts its failures."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from verispec.reference.sampling import inverse_cdf_draws, inverse_cdf_rows
from verispec.reference.speculative import Probs2D, Verdict
from verispec.spec.subject import PropertyResult, Subject


def dyadic_row(
    rng: np.random.Generator, vocab: int, bits: int = 6, *, support: npt.NDArray[np.bool_] | None = None
) -> npt.NDArray[np.float64]:
    """A random probability row with entries that are multiples of 2^-bits, summing exactly to 1.

    ``support`` restricts the nonzero ids; zeros also occur by chance.
    """
    allowed = np.ones(vocab, dtype=np.bool_) if support is None else support
    ids = np.flatnonzero(allowed)
    weights = rng.dirichlet(np.full(ids.shape[0], 0.7))
    counts = rng.multinomial(2**bits, weights)
    row = np.zeros(vocab, dtype=np.float64)
    row[ids] = counts / 2.0**bits
    return row


SHAPES = ("independent", "equal", "disjoint", "one_hot_p", "one_hot_q", "ties", "zeros_in_q")


def small_case(rng: np.random.Generator, vocab: int, k: int, shape: str, bits: int = 6) -> tuple[Probs2D, Probs2D]:
    """Target rows [k+1, V] and draft rows [k, V] of a given structure (dyadic)."""
    p = np.stack([dyadic_row(rng, vocab, bits) for _ in range(k + 1)])
    q = np.stack([dyadic_row(rng, vocab, bits) for _ in range(k)])
    for i in range(k):
        if shape == "equal":
            q[i] = p[i]
        elif shape == "disjoint" and vocab >= 2:
            cut = int(rng.integers(1, vocab))
            perm = rng.permutation(vocab)
            in_p = np.zeros(vocab, dtype=np.bool_)
            in_p[perm[:cut]] = True
            p[i] = dyadic_row(rng, vocab, bits, support=in_p)
            q[i] = dyadic_row(rng, vocab, bits, support=~in_p)
        elif shape == "one_hot_p":
            p[i] = np.eye(vocab)[int(rng.integers(vocab))]
        elif shape == "one_hot_q":
            q[i] = np.eye(vocab)[int(rng.integers(vocab))]
        elif shape == "ties":
            tied = rng.permutation(vocab)[: max(1, vocab // 2 * 2)]
            p[i] = 0.0
            p[i, tied] = 1.0 / tied.shape[0] if tied.shape[0] in (1, 2, 4, 8) else 0.0
            if p[i].sum() == 0:
                p[i, tied[:2] if tied.shape[0] >= 2 else tied[:1]] = 1.0 / min(2, tied.shape[0])
        elif shape == "zeros_in_q" and vocab >= 2:
            support = np.ones(vocab, dtype=np.bool_)
            support[int(rng.integers(vocab))] = False
            q[i] = dyadic_row(rng, vocab, bits, support=support)
    if shape == "one_hot_p":
        p[k] = np.eye(vocab)[int(rng.integers(vocab))]
    return p, q


def draw_drafts(rng: np.random.Generator, q: Probs2D, n: int) -> npt.NDArray[np.int64]:
    """n draft paths [n, k] drawn from shared rows q [k, V] (harness-side inverse CDF)."""
    u = rng.random((n, q.shape[0]))  # [n, k]
    return np.stack([inverse_cdf_draws(q[i], u[:, i]) for i in range(q.shape[0])], axis=1)  # [n, k]


def draw_from_rows(rng: np.random.Generator, rows: Probs2D) -> npt.NDArray[np.int64]:
    """One draw per row of rows [n, V] (harness-side inverse CDF)."""
    return inverse_cdf_rows(rows, rng.random((rows.shape[0],)))


MAX_FAILURES = 3  # a property stops collecting (and running) cases after this many failures


LISTED_FAILURES = 20  # failing cases named in a detail (the contract has fewer: every one is listed)


def property_result(name: str, failures: list[str], cases: int) -> PropertyResult:
    if failures:
        listed = "; ".join(failures[:LISTED_FAILURES])
        more = f" (+{len(failures) - LISTED_FAILURES} more)" if len(failures) > LISTED_FAILURES else ""
        return PropertyResult(name, False, cases, 0.0, 1.0, f"{len(failures)} of {cases} cases fail: {listed}{more}")
    return PropertyResult(name, True, cases, 0.0, 1.0, f"{cases} cases agree")


def verdict_or_error(
    subject: Subject, p: Probs2D, q: Probs2D, drafts: Sequence[int], uniforms: Sequence[float]
) -> Verdict | str:
    """The verifier's verdict, or a description of what it raised."""
    try:
        return subject.verifier(p, q, list(drafts), list(uniforms))
    except Exception as exc:  # the subject may be arbitrarily broken: report, do not crash
        return f"raised {type(exc).__name__}: {exc}"
