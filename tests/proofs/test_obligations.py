"""Every obligation of ``python -m verispec.proofs`` is discharged: one test per obligation."""

from __future__ import annotations

import pytest

from verispec.proofs.catalog import all_obligations
from verispec.proofs.core import Obligation, check

OBLIGATIONS = all_obligations()


@pytest.mark.parametrize("obligation", OBLIGATIONS, ids=[ob.name for ob in OBLIGATIONS])
def test_obligation(obligation: Obligation) -> None:
    result = check(obligation)
    detail = "\n".join(result.model) or result.reason
    expected = "proved" if obligation.kind == "valid" else "witnessed"
    assert result.status == expected, f"{obligation.name}: {result.status}\n{detail}"
