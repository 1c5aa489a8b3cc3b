"""The calibration prompt generator and the prompt-kind rule; the held-out prompts stay disjoint."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from reference.errors import CalibrationError
from reference.prompt_kind import PROMPT_KINDS, prompt_kind
from verispec.calibration_prompts import DEFAULT_SEED, generate, generate_mix

HELDOUT = Path(__file__).resolve().parents[1] / "verispec" / "data" / "prompts_heldout.jsonl"
GENERATED_PER_KIND = 1000  # more than any calibration here uses (defaults: 8 lens + 60 calibration)


def heldout() -> list[tuple[str, str]]:
    return [(item["kind"], item["text"]) for item in map(json.loads, HELDOUT.read_text().splitlines())]


def normal(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def test_generator_is_deterministic_unique_and_extends() -> None:
    for kind in PROMPT_KINDS:
        first = generate(kind, 300)
        assert first == generate(kind, 300) and len(set(first)) == 300
        assert generate(kind, 500)[:300] == first  # a longer list extends a shorter one
        assert generate(kind, 50, seed=DEFAULT_SEED + 1) != first[:50]
    mix = generate_mix(5, skip=3)
    assert [k for k, _ in mix[:4]] == list(PROMPT_KINDS)
    lens = generate_mix(3)
    assert not {t for _, t in lens} & {t for _, t in mix}  # lens and calibration prompts are disjoint
    with pytest.raises(CalibrationError, match="no prompt generator"):
        generate("poetry", 3)


def test_the_rule_puts_every_generated_and_held_out_prompt_in_its_kind() -> None:
    for kind in PROMPT_KINDS:
        wrong = [t for t in generate(kind, GENERATED_PER_KIND) if prompt_kind(t) != kind]
        assert not wrong, f"{kind}: {wrong[:3]}"
    assert [prompt_kind(text) for _, text in heldout()] == [kind for kind, _ in heldout()]
    assert prompt_kind("   ") == "prose" and prompt_kind("tell me a joke") == "chat"


def test_held_out_prompts_are_disjoint_from_the_generator() -> None:
    """No held-out prompt (nor its first line), up to case and whitespace, is a generated prompt
    or the first line of one, for the first 1000 per kind of the default seed."""
    items = heldout()
    per_kind = {kind: sum(k == kind for k, _ in items) for kind in PROMPT_KINDS}
    # >= 25 per kind: a per-kind one-sided 95% bound on a flip fraction near 0.1 is then within ~0.1
    assert {k for k, _ in items} == set(PROMPT_KINDS) and min(per_kind.values()) >= 25, per_kind
    assert len({normal(t) for _, t in items}) == len(items)
    generated = [t for kind in PROMPT_KINDS for t in generate(kind, GENERATED_PER_KIND)]
    whole = {normal(t) for t in generated}
    first_lines = {normal(t.strip().splitlines()[0]) for t in generated}
    for _, text in items:
        assert normal(text) not in whole, text
        assert normal(text.strip().splitlines()[0]) not in first_lines, text
