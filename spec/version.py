"""The version of verispec this spec ships in: a report names it, a merge refuses another's shards.

``verispec.__version__`` is this value (pyproject.toml's ``version`` must equal it: tests/test_api.py).
It lives in the spec, not in the package above it, so that the spec imports nothing from the
layer that calls it.
"""

VERSION = "0.1.0"
