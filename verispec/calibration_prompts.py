"""A seeded, deterministic generator of calibration prompts for early exit, by kind.

The prompt-level guarantee needs on the order of K/alpha calibration prompts PER KIND
(:func:`reference.conformal.min_prompts`: 49 for alpha = 0.1 over 5 depths), far more than anyone
writes by hand. Each kind has a few templates filled from word lists with ``random.Random(seed)``:

- ``structured``: JSON objects, CSV, Markdown tables, YAML, HTML lists, XML records, schedules,
  numbered steps;
- ``code``: Python function and class stubs, JavaScript functions, C functions, SQL queries,
  scripts that start with imports;
- ``chat``: questions and requests (asked in the model's chat format when it has one);
- ``prose``: openings of stories, reports and explanations to continue.

Same (kind, n, seed) -> same list, on every machine (no hash(), no set iteration order). Texts are
unique within a call, and every text is put in its kind by :func:`reference.prompt_kind.prompt_kind`
(tests/test_calibration_prompts.py checks both). The hand-written held-out prompts
(verispec/data/prompts_heldout.jsonl) are kept disjoint from what this module generates (same test).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from verispec.reference.errors import CalibrationError
from verispec.reference.prompt_kind import PROMPT_KINDS

DEFAULT_SEED = 20261130

FIRST = "Alice Bruno Chen Dana Emeka Farah Goran Hana Ivan Jia Kofi Lena Mateo Nadia Omar Priya Quinn Rosa Sven Tariq Uma Viktor Wen Yara Zeno".split()
CITY = "Lisbon Nairobi Osaka Quito Oslo Lima Hanoi Accra Dublin Perth Tunis Riga Cusco Bergen Porto Izmir Kazan Leeds Mysore Natal".split()
ITEM = "apple pear plum lemon mango onion carrot pepper bread rice coffee tea butter cheese yogurt honey".split()
NOUN = (
    "invoice order user ticket sensor reading message account booking parcel route shift playlist recipe lesson".split()
)
VERB = "parse load merge count filter sort validate format compute render encode normalize export update clean".split()
FIELD = "id name email price quantity status created total score level rating weight height color region".split()
TOPIC = [
    "photosynthesis",
    "compound interest",
    "the water cycle",
    "inflation",
    "plate tectonics",
    "vaccines",
    "machine learning",
    "the stock market",
    "black holes",
    "recycling",
    "jet lag",
    "the immune system",
    "solar panels",
    "tides",
    "credit scores",
    "sourdough bread",
    "public transport",
    "sleep cycles",
]
ACTIVITY = [
    "running a first marathon",
    "learning a new language",
    "keeping houseplants alive",
    "saving for a trip",
    "writing a cover letter",
    "cooking for a large group",
    "studying for an exam",
    "moving to a new city",
    "starting a vegetable garden",
    "training a puppy",
    "giving a short speech",
    "organizing a small office",
]
PLACE = (
    "harbor town|mountain village|desert city|river valley|small island|old library|train station|university lab".split(
        "|"
    )
)
ADJ = "quiet crowded ancient rainy forgotten busy narrow famous remote windy".split()
DAY = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
EVENT = "standup|dentist|gym|lunch with Sam|code review|piano lesson|team sync|grocery run|call with the bank".split(
    "|"
)


def _pick(rng: random.Random, items: list[str], k: int = 1) -> list[str]:
    return rng.sample(items, k)


def _structured(rng: random.Random) -> str:
    form = rng.randrange(8)
    if form == 0:
        name, city = _pick(rng, FIRST)[0], _pick(rng, CITY)[0]
        key = _pick(rng, ["skills", "tags", "languages", "pets", "orders"])[0]
        return f'{{"name": "{name}", "age": {rng.randint(18, 80)}, "city": "{city}", "{key}": ['
    if form == 1:
        a, b, c = _pick(rng, FIELD, 3)
        rows = [
            f"{_pick(rng, ITEM)[0]},{rng.randint(1, 99)}.{rng.randint(0, 99):02d},{rng.randint(1, 50)}"
            for _ in range(rng.randint(2, 3))
        ]
        return "\n".join([f"{a},{b},{c}"] + rows) + "\n"
    if form == 2:
        a, b = _pick(rng, FIELD, 2)
        rows = [f"| {_pick(rng, CITY)[0]} | {rng.randint(1, 999)} |" for _ in range(rng.randint(1, 3))]
        return "\n".join([f"| {a.title()} | {b.title()} |", "|---|---|"] + rows) + "\n"
    if form == 3:
        section, other = _pick(rng, ["server", "database", "cache", "logging", "auth", "queue"], 2)
        return f"{section}:\n  host: {_pick(rng, CITY)[0].lower()}.local\n  port: {rng.randint(1024, 9999)}\n{other}:\n"
    if form == 4:
        items = _pick(rng, ITEM, rng.randint(2, 3))
        return "<ul>\n" + "".join(f"  <li>{x.title()}</li>\n" for x in items)
    if form == 5:
        noun = _pick(rng, NOUN)[0]
        return f'<{noun} id="{rng.randint(1, 999)}">\n  <owner>{_pick(rng, FIRST)[0]}</owner>\n  <city>{_pick(rng, CITY)[0]}</city>\n'
    if form == 6:
        days = DAY[rng.randrange(3) :][: rng.randint(2, 4)]
        lines = [
            f"{d}: {rng.randint(7, 18)}:{rng.choice(['00', '15', '30', '45'])} {_pick(rng, EVENT)[0]}"
            for d in days[:-1]
        ]
        return "\n".join(lines + [f"{days[-1]}:"])
    steps = [f"{i + 1}. {v.title()} the {n}." for i, (v, n) in enumerate(zip(_pick(rng, VERB, 2), _pick(rng, NOUN, 2)))]
    return "\n".join(steps + ["3."])


def _code(rng: random.Random) -> str:
    form = rng.randrange(6)
    verb, noun = _pick(rng, VERB)[0], _pick(rng, NOUN)[0]
    if form == 0:
        args = ", ".join(_pick(rng, FIELD, rng.randint(1, 3)))
        return f'def {verb}_{noun}({args}):\n    """{verb.title()} the {noun} and return the result."""\n'
    if form == 1:
        field_name = _pick(rng, FIELD)[0]
        return f"class {noun.title()}{_pick(rng, ['Store', 'Queue', 'Cache', 'Index'])[0]}:\n    def __init__(self, {field_name}):\n"
    if form == 2:
        a, b = _pick(rng, FIELD, 2)
        return f"function {verb}{noun.title()}({a}, {b}) {{\n  const result = "
    if form == 3:
        return f"#include <stdio.h>\n\nint {verb}_{noun}s(int *values, int n) {{\n    int i;\n"
    if form == 4:
        col, other = _pick(rng, FIELD, 2)
        return f"SELECT {col}, COUNT(*) AS n\nFROM {noun}s\nWHERE {other} > {rng.randint(1, 500)}\n"
    module = _pick(rng, ["json", "csv", "math", "re", "datetime", "statistics"])[0]
    return f"# {verb.title()} every {noun} in a file\nimport {module}\n\n"


def _chat(rng: random.Random) -> str:
    form = rng.randrange(10)
    a, b = _pick(rng, TOPIC, 2)
    if form == 7:
        return f"How does {a} matter when {_pick(rng, ACTIVITY)[0]}?"
    if form == 8:
        return f"Could you compare {a} with {b} for a curious teenager?"
    if form == 9:
        return f"What would {_pick(rng, FIRST)[0]} need to know about {a} before {_pick(rng, ACTIVITY)[0]}?"
    if form == 0:
        return f"What is the difference between {a} and {b}?"
    if form == 1:
        return f"Can you explain {a} in simple terms?"
    if form == 2:
        return f"Give me {rng.choice(['three', 'four', 'five'])} tips for {_pick(rng, ACTIVITY)[0]}."
    if form == 3:
        return f"How should I prepare for {_pick(rng, ACTIVITY)[0]}?"
    if form == 4:
        return f"Why do people find {a} hard to understand?"
    if form == 5:
        return f"Write a short note to {_pick(rng, FIRST)[0]} about {_pick(rng, ACTIVITY)[0]}."
    return f"Which matters more for a beginner in {a}: practice or theory?"


def _prose(rng: random.Random) -> str:
    form = rng.randrange(6)
    if form == 0:
        return f"The {_pick(rng, ADJ)[0]} {_pick(rng, PLACE)[0]} of {_pick(rng, CITY)[0]} was built in {rng.randint(1200, 1950)}, and"
    if form == 1:
        return f"In the spring of {rng.randint(1900, 2020)}, {_pick(rng, FIRST)[0]} left {_pick(rng, CITY)[0]} with nothing but"
    if form == 2:
        return f"Over the last {rng.randint(5, 50)} years, {_pick(rng, TOPIC)[0]} has changed in ways that"
    if form == 3:
        return f"Once, in a {_pick(rng, ADJ)[0]} {_pick(rng, PLACE)[0]}, there lived a {_pick(rng, NOUN)[0]} clerk named {_pick(rng, FIRST)[0]} who"
    if form == 4:
        return f"Scientists have studied {_pick(rng, TOPIC)[0]} for decades because"
    return f"The report on {_pick(rng, TOPIC)[0]} in {_pick(rng, CITY)[0]} begins with a simple observation:"


TEMPLATES: dict[str, Callable[[random.Random], str]] = {
    "chat": _chat,
    "code": _code,
    "structured": _structured,
    "prose": _prose,
}


def generate(kind: str, n: int, seed: int = DEFAULT_SEED) -> list[str]:
    """``n`` distinct prompts of ``kind`` (deterministic in (kind, n-prefix, seed): a longer list
    extends a shorter one)."""
    if kind not in TEMPLATES:
        raise CalibrationError(f"no prompt generator for kind {kind!r}; kinds: {', '.join(PROMPT_KINDS)}")
    if n < 0:
        raise CalibrationError(f"number of prompts must be >= 0, got {n}")
    rng = random.Random(f"{seed}:{kind}")  # str seeds are hashed by sha512: stable across runs
    out: list[str] = []
    seen: set[str] = set()
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 50 * n + 1000:
            raise CalibrationError(f"the {kind!r} templates ran out of distinct prompts after {len(out)}")
        text = TEMPLATES[kind](rng)
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


def generate_mix(per_kind: int, seed: int = DEFAULT_SEED, skip: int = 0) -> list[tuple[str, str]]:
    """(kind, text) for ``per_kind`` prompts of every kind, kinds interleaved; ``skip`` drops each
    kind's first prompts (so a lens split of the first ``skip`` is disjoint from this one)."""
    lists = {kind: generate(kind, skip + per_kind, seed)[skip:] for kind in PROMPT_KINDS}
    return [(kind, lists[kind][i]) for i in range(per_kind) for kind in PROMPT_KINDS]
