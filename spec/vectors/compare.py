"""The comparison rule: does an implementation's response agree with a case's expected output?"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def compare(case: Mapping[str, Any], got: Mapping[str, Any]) -> str | None:
    """None if the response ``got`` agrees with ``case["expected"]``; else one line saying why.

    Rules: an expected ``{"error": true}`` needs a response with an ``"error"`` field; otherwise
    every expected field must be present. Fields named in ``case["tolerance"]`` (probability
    rows) must agree within that absolute tolerance per entry, with exactly the same zero entries
    and the same shape; every other field must be equal exactly: integers as integers (``2.0``
    is not a token id), booleans as booleans, strings and null as themselves, and a float by value
    (an integer-valued float may come back as a JSON integer, as JavaScript writes it).
    """
    expected: Mapping[str, Any] = case["expected"]
    if expected.get("error"):
        if "error" in got:
            return None
        return f"expected the input to be rejected with an error, got {_short(got)}"
    if "error" in got:
        return f"rejected a valid input: {str(got['error'])[:200]}"
    tolerance: Mapping[str, float] = case.get("tolerance", {})
    for field, want in expected.items():
        if field not in got:
            return f"response lacks field {field!r}"
        have = got[field]
        if field in tolerance:
            problem = _close(want, have, float(tolerance[field]))
            if problem:
                return f"{field}: {problem}"
        elif not _exactly_equal(want, have):
            return f"{field}: expected {_short(want)}, got {_short(have)}"
    return None


def _exactly_equal(want: Any, have: Any) -> bool:
    if isinstance(want, bool) or isinstance(have, bool):
        return type(want) is type(have) and want == have
    if isinstance(want, list):
        return (
            isinstance(have, list) and len(want) == len(have) and all(_exactly_equal(a, b) for a, b in zip(want, have))
        )
    if isinstance(want, int):
        return isinstance(have, int) and want == have
    if isinstance(want, float):
        return isinstance(have, (int, float)) and want == have
    return bool(want == have) and type(want) is type(have)


def _close(want: Any, have: Any, tol: float, where: str = "") -> str | None:
    if isinstance(want, list):
        if not isinstance(have, list) or len(have) != len(want):
            return f"expected a list of {len(want)}{where}, got {_short(have)}"
        for i, (a, b) in enumerate(zip(want, have)):
            problem = _close(a, b, tol, f"{where}[{i}]")
            if problem:
                return problem
        return None
    if isinstance(have, bool) or not isinstance(have, (int, float)):
        return f"expected a number at {where or 'value'}, got {_short(have)}"
    if (want == 0) != (have == 0):
        return f"zero pattern differs at {where}: expected {want!r}, got {have!r}"
    if not abs(float(want) - float(have)) <= tol:
        return f"at {where}: expected {want!r}, got {have!r} (tolerance {tol})"
    return None


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
