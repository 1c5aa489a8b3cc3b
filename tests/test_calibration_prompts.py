"""The calibration prompts (hand-written pool, generator), the prompt-kind rule, and the held-out
prompts kept disjoint from both."""

from __future__ import annotations

import json
import re
from fractions import Fraction
from pathlib import Path

import pytest

from verispec.calibration_prompts import DEFAULT_SEED, generate, generate_mix
from verispec.commands.calibrate import hand_written_pool
from verispec.reference.conformal import min_prompts
from verispec.reference.errors import CalibrationError
from verispec.reference.prompt_kind import PROMPT_KINDS, prompt_kind

DATA = Path(__file__).resolve().parents[1] / "verispec" / "data"
HELDOUT = DATA / "prompts_heldout.jsonl"
POOL = DATA / "prompts_calibration.jsonl"
GENERATED_PER_KIND = 1000  # more than any calibration here uses (defaults: 8 lens + 60 calibration)


def read(path: Path) -> list[tuple[str, str]]:
    return [(item["kind"], item["text"]) for item in map(json.loads, path.read_text().splitlines())]


def heldout() -> list[tuple[str, str]]:
    return read(HELDOUT)


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


def test_the_hand_written_pool_is_big_enough_ruled_and_disjoint() -> None:
    """The default calibration pool: every kind has enough prompts for alpha = 0.1 over the 5
    default depths (min_prompts = ceil(5 / 0.1) - 1 = 49), each prompt's declared kind is the
    rule's, and no pool prompt (nor its first line), up to case and whitespace, is a held-out
    prompt, another pool prompt, a generated prompt or the first line of any of them (the lens
    prompts, generated, are then disjoint from the pool too)."""
    pool = read(POOL)
    needed = min_prompts(Fraction(1, 10), 5)
    assert needed == 49
    per_kind = {kind: sum(k == kind for k, _ in pool) for kind in PROMPT_KINDS}
    assert min(per_kind.values()) >= needed and set(per_kind) == {k for k, _ in pool}, per_kind
    assert [prompt_kind(text) for _, text in pool] == [kind for kind, _ in pool]
    assert hand_written_pool() == pool  # the CLI's default serves the whole pool, kinds by the rule
    firsts = [normal(t.strip().splitlines()[0]) for _, t in pool]
    assert len(set(firsts)) == len(pool) and len({normal(t) for _, t in pool}) == len(pool)
    generated = [t for kind in PROMPT_KINDS for t in generate(kind, GENERATED_PER_KIND)]
    others = [t for _, t in heldout()] + generated
    whole = {normal(t) for t in others}
    first_lines = {normal(t.strip().splitlines()[0]) for t in others}
    for _, text in pool:
        assert normal(text) not in whole, text
        assert normal(text.strip().splitlines()[0]) not in first_lines, text
    some = hand_written_pool(2)
    assert [k for k, _ in some] == [k for k in PROMPT_KINDS for _ in range(2)] and set(some) <= set(pool)


def test_calibrate_chooses_the_pool_by_default_and_the_generator_on_request() -> None:
    """`verispec calibrate`'s prompt choice (no model): the default is the whole pool with
    generated lens prompts; ``--prompts generated`` is the generator's 60 per kind after the lens
    prompts; in both, lens and calibration prompts are disjoint."""
    import argparse

    from verispec.commands.calibrate import chosen_prompts

    def args(prompts: str, per_kind: int | None = None) -> argparse.Namespace:
        return argparse.Namespace(
            prompts=prompts,
            prompts_per_kind=per_kind,
            lens_prompts_per_kind=8,
            seed=DEFAULT_SEED,
            no_lens=False,
            max_prompts=None,
            kinds="rule",
        )

    cal, lens = chosen_prompts(args("hand"))
    assert cal == read(POOL) and lens == generate_mix(8) and not {t for _, t in cal} & {t for _, t in lens}
    cal, lens = chosen_prompts(args("generated"))
    assert cal == generate_mix(60, skip=8) and lens == generate_mix(8)
    assert chosen_prompts(args("generated", 5))[0] == generate_mix(5, skip=8)
    with pytest.raises(CalibrationError, match="cannot read prompts"):
        chosen_prompts(args("no-such-file.jsonl"))
