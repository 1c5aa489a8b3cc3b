"""Generators of the early-exit cases: gate decisions (margin, quantile, slack, dtype -> admit) and
the conformal order-statistic index ceil((n + 1) q)."""

from __future__ import annotations

import numpy as np

from verispec.spec.vectors.draws import Item


def gate_items(rng: np.random.Generator, count: int) -> list[Item]:
    """Early-exit gate decisions: (gate, margin, quantile, slack, dtype) -> admit."""
    items: list[Item] = []
    f32 = np.float32
    for _ in range(count):
        dtype_name = str(rng.choice(["float32", "float64"]))
        cast = f32 if dtype_name == "float32" else np.float64
        gate = str(rng.choice(["supnorm", "halfrange", "margin"]))
        quantile = float(cast(abs(rng.normal(0.0, 3.0))))
        margin = float(cast(2 * quantile + rng.normal(0.0, 0.01) * max(quantile, 1e-3)))
        margin = abs(margin)
        if gate == "margin":
            items.append(({"gate": "margin", "margin": margin, "threshold": quantile, "dtype": dtype_name}, ["random"]))
            continue
        slack = None if rng.random() < 0.5 else float(cast(abs(rng.normal(0.0, 1e-5))))
        items.append(
            ({"gate": gate, "margin": margin, "quantile": quantile, "slack": slack, "dtype": dtype_name}, ["random"])
        )
    # boundaries: 2 (Q + slack) == margin exactly must not admit (strict); one ulp above must
    for dtype_name, cast in (("float32", f32), ("float64", np.float64)):
        q = cast(1.5)
        exact_bound = float(cast(2) * (q + cast(0.25)))
        above = float(np.nextafter(cast(exact_bound), cast(np.inf)))
        for gate in ("supnorm", "halfrange"):
            items.append(
                (
                    {"gate": gate, "margin": exact_bound, "quantile": float(q), "slack": 0.25, "dtype": dtype_name},
                    ["edge", "strict_boundary"],
                )
            )
            items.append(
                (
                    {"gate": gate, "margin": above, "quantile": float(q), "slack": 0.25, "dtype": dtype_name},
                    ["edge", "one_ulp_above"],
                )
            )
            items.append(
                (
                    {"gate": gate, "margin": 3.0, "quantile": 1.5, "slack": None, "dtype": dtype_name},
                    ["edge", "default_slack_decides"],
                )
            )
            items.append(
                (
                    {"gate": gate, "margin": float(cast(1e-30)), "quantile": 0.0, "slack": None, "dtype": dtype_name},
                    ["edge", "zero_quantile"],
                )
            )
        items.append(
            ({"gate": "margin", "margin": 2.0, "threshold": 2.0, "dtype": dtype_name}, ["edge", "strict_boundary"])
        )
    items.append(
        (
            {
                "gate": "supnorm",
                "margin": float(np.finfo(f32).max),
                "quantile": float(f32(2e38)),
                "slack": None,
                "dtype": "float32",
            },
            ["edge", "overflow_refuses"],
        )
    )
    items.append(
        (
            {"gate": "supnorm", "margin": 1.0, "quantile": 0.1, "slack": 0.1, "dtype": "float32"},
            ["invalid", "not_a_float32_value"],
        )
    )
    items.append(
        (
            {"gate": "halfrange", "margin": 1.0, "quantile": -0.5, "slack": None, "dtype": "float64"},
            ["invalid", "negative_quantile"],
        )
    )
    return items


def conformal_items(rng: np.random.Generator, count: int) -> list[Item]:
    """The conformal order-statistic index ceil((n + 1) q), exactly; null when it exceeds n."""
    items: list[Item] = []
    levels = ["0.9", "0.95", "0.99", "0.999", "0.5", "0.8", "0.975"]
    for _ in range(count):
        n = int(rng.integers(1, 5000))
        q = str(rng.choice(levels)) if rng.random() < 0.6 else f"{int(rng.integers(1, 10**6)) / 10**6:.6f}".rstrip("0")
        items.append(({"n": n, "q": q}, ["random"]))
    edges = [
        (9, "0.9"),
        (99, "0.99"),
        (999, "0.999"),
        (19, "0.95"),
        (8, "0.9"),
        (98, "0.99"),
        (1, "0.5"),
        (1, "0.51"),
        (2, "0.6666666666666666"),
        (100, "0.99"),
        (10**6, "0.999999"),
        (2, "2/3"),
        (5, "5/6"),
        (5, "6/7"),
    ]
    for n, q in edges:
        items.append(({"n": n, "q": q}, ["edge", "exact_ceiling"]))
    for n, q, label in [
        (0, "0.9", "n_equals_0"),
        (10, "1", "q_equals_1"),
        (10, "0", "q_equals_0"),
        (10, "1.5", "q_above_1"),
    ]:
        items.append(({"n": n, "q": q}, ["invalid", label]))
    return items
