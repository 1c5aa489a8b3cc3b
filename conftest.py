"""Suite-wide pytest configuration: Hypothesis profiles.

Profiles (choose with ``VERISPEC_HYPOTHESIS_PROFILE``; ``ci`` is selected automatically when the
``CI`` environment variable is set, ``dev`` otherwise):

- ``ci``: derandomized (the same examples on every run, so CI is reproducible), no deadline.
- ``dev``: fast, few examples, for the edit-test loop.
- ``thorough``: many examples, for a nightly run.

Tests that need more examples than the profile's default (the GGUF fuzz test asks for >= 2,000
under ``ci``) scale with :func:`tests.support.profiles.examples`.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=200,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=30, deadline=None)
settings.register_profile("thorough", max_examples=5_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_profile = os.environ.get("VERISPEC_HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
settings.load_profile(_profile)
