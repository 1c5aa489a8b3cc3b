"""examples/external_verifier.py draws by binary search over running sums computed once per stop
position of a batch; it must answer exactly what the protocol's linear scan answers (the first t
with u * total < running[t], else the largest id of positive weight). The scan is restated here
as the oracle and compared on weights with zeros, ties, flat stretches and subnormal totals, at
uniforms including 0 and the largest double below 1."""

from __future__ import annotations

import importlib.util
import math
import random
from pathlib import Path
from types import ModuleType

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "external_verifier.py"


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("external_verifier_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def linear_scan_draw(weights: list[float], u: float) -> int:
    """The protocol's inverse CDF as a scan over ascending ids (the example's former code).

    Independent oracle by design: restated from spec/protocol.md's ``draw`` block, never imported
    from reference, so the example and the reference cannot share a mistake through it."""
    running = []
    total = 0.0
    for w in weights:
        total += w
        running.append(total)
    threshold = u * total
    for t, c in enumerate(running):
        if threshold < c:
            return t
    return max(t for t, w in enumerate(weights) if w > 0)


def _weights(rng: random.Random) -> list[float]:
    vocab = rng.choice([1, 2, 3, 7, 64, 1000])
    kind = rng.choice(["dense", "sparse", "ties", "subnormal"])
    if kind == "dense":
        return [rng.random() for _ in range(vocab)]
    if kind == "sparse":
        out = [rng.random() if rng.random() < 0.2 else 0.0 for _ in range(vocab)]
    elif kind == "ties":
        out = [rng.choice([0.0, 0.125, 0.25]) for _ in range(vocab)]
    else:
        out = [rng.choice([0.0, 5e-324, 1e-323]) for _ in range(vocab)]
    out[rng.randrange(vocab)] = out[rng.randrange(vocab)] or 5e-324  # at least one positive weight
    return out if any(w > 0 for w in out) else [*out[:-1], 5e-324]


def test_binary_search_draw_equals_the_linear_scan() -> None:
    example = _example()
    rng = random.Random(3)
    below_one = math.nextafter(1.0, 0.0)
    overflowed = 0
    for _ in range(3000):
        weights = _weights(rng)
        sums = example.running_sums(weights)
        for u in (0.0, 0.5, below_one, rng.random(), rng.random()):
            want = linear_scan_draw(weights, u)
            assert example.draw(sums, u) == want, (weights[:8], u)
            overflowed += u * sums[0][-1] >= sums[0][-1]
    assert overflowed > 100  # the "largest id of positive weight" branch is exercised


def test_batch_with_shared_sums_equals_one_verification_at_a_time() -> None:
    example = _example()
    rng = random.Random(4)
    for _ in range(200):
        vocab, k = rng.choice([2, 5, 40]), rng.choice([1, 2, 4])
        rows = [[rng.random() * (rng.random() < 0.7) + 1e-9 for _ in range(vocab)] for _ in range(2 * k + 1)]
        p = [[w / sum(r) for w in r] for r in rows[: k + 1]]
        q = [[w / sum(r) for w in r] for r in rows[k + 1 :]]
        items = [([rng.randrange(vocab) for _ in range(k)], [rng.random() for _ in range(k + 1)]) for _ in range(20)]
        batch = example.op_sampled_batch(
            {"p": p, "q": q, "drafts": [d for d, _ in items], "uniforms": [u for _, u in items]}
        )
        for n, (drafts, uniforms) in enumerate(items):
            one = example.op_sampled({"p": p, "q": q, "drafts": drafts, "uniforms": uniforms})
            assert (batch["accepted"][n], batch["token"][n], batch["kind"][n]) == (
                one["accepted"],
                one["token"],
                one["kind"],
            )
