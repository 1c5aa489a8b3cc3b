"""The names of everything ``verispec check`` can run, in its order: vector replays, then the properties.

Its own module so that the check (:mod:`spec.check`) and the merge of shards (:mod:`spec.merge`)
both read it without importing each other.
"""

from __future__ import annotations

from verispec.spec.properties import PROPERTY_NAMES
from verispec.spec.vectors import KINDS


def property_names() -> list[str]:
    """Every property ``run_check`` can run, in order: vector replays, then the spec's."""
    return [f"vectors_{kind}" for kind in KINDS] + list(PROPERTY_NAMES)
