"""Fixtures shared by tests/: real models from the registry and the golden data.

Real models are installed by `make test` (`verispec models fetch ...`). A test marked ``model`` that
cannot find one fails with the one-line fetch hint rather than skipping: a skipped oracle test is
not a passed one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from verispec.registry import resolve_model

DATA = Path(__file__).parent / "data"
GOLDEN = DATA / "golden"

# registry name -> key in golden.json
GOLDEN_KEYS = {"smollm2-135m": "smollm2-135m-q4_1", "gemma3-270m": "gemma3-270m-q4_k_m"}


@pytest.fixture(scope="session")
def golden() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / "golden.json").read_text())
    return data


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    return resolve_model("smollm2-135m")


@pytest.fixture(scope="session")
def gemma3_path() -> Path:
    return resolve_model("gemma3-270m")


@pytest.fixture(scope="session", params=["smollm2-135m", "gemma3-270m"])
def model_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name
