"""Example counts that scale with the active Hypothesis profile."""

from __future__ import annotations

from hypothesis import settings

_SCALE = {"ci": 1.0, "dev": 0.1, "thorough": 5.0}


def active_profile() -> str:
    """Name of the loaded Hypothesis profile (``ci``, ``dev``, ``thorough`` or ``default``)."""
    name: str = getattr(settings, "_current_profile", None) or "default"
    return name


def examples(ci_count: int) -> int:
    """``ci_count`` under ``ci``, a tenth under ``dev``, five times under ``thorough`` (min 10)."""
    return max(10, int(ci_count * _SCALE.get(active_profile(), 1.0)))
