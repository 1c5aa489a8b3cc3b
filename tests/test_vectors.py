"""spec/vectors/: deterministic bytes, the manifest, deliberate edge cases, and the expected
outputs against oracles that are not the code that produced them.

Oracles: the exact rational protocol of spec/exact.py (sampled and greedy verdicts), gguf-py
(dequantization bits), the conformal index by Fraction ceiling written here, and the gate
formula re-derived here in numpy float32/float64. The plain-Python example verifier (an
independent implementation of the whole wire protocol) replays every vector in tests/test_check.py.
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from verispec.reference.errors import VerispecError
from verispec.spec import exact
from verispec.spec.vectors import (
    DEFAULT_COUNT,
    DEFAULT_SEED,
    FORMAT_MARKDOWN,
    KINDS,
    VectorError,
    VectorSet,
    build_vectors,
    compare,
    read_vectors,
    write_vectors,
)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def vectors() -> VectorSet:
    """The vectors `verispec check` replays by default."""
    return build_vectors(DEFAULT_COUNT, DEFAULT_SEED)


def _valid(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in cases if not c["expected"].get("error")]


# -----------------------------------------------------------------------------------------------
# files: determinism, manifest, format README


def test_same_seed_same_bytes_in_process_and_through_the_cli(tmp_path: Path) -> None:
    first, second, cli = tmp_path / "a", tmp_path / "b", tmp_path / "cli"
    write_vectors(first, count=5, seed=11)
    write_vectors(second, count=5, seed=11)
    # a fresh interpreter (another hash seed) must write the very same bytes
    subprocess.run(
        [sys.executable, "-m", "verispec", "vectors", "--out", str(cli), "--count", "5", "--seed", "11"],
        check=True,
        cwd=REPO,
        capture_output=True,
        env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"},
    )
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in second.iterdir()) == sorted(p.name for p in cli.iterdir())
    assert names == sorted([f"{k}.jsonl" for k in KINDS] + ["manifest.json", "FORMAT.md"])
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes() == (cli / name).read_bytes(), name


def test_another_seed_other_cases(tmp_path: Path) -> None:
    write_vectors(tmp_path / "a", count=5, seed=1)
    write_vectors(tmp_path / "b", count=5, seed=2)
    assert (tmp_path / "a" / "sampled.jsonl").read_bytes() != (tmp_path / "b" / "sampled.jsonl").read_bytes()


def test_manifest_counts_hashes_and_round_trip(tmp_path: Path) -> None:
    manifest = write_vectors(tmp_path, count=7, seed=3)
    assert manifest == json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["protocol_version"] == 1 and manifest["format_version"] == 1
    assert manifest["seed"] == 3 and manifest["count"] == 7
    assert [f["kind"] for f in manifest["files"]] == list(KINDS)
    for entry in manifest["files"]:
        blob = (tmp_path / entry["name"]).read_bytes()
        assert hashlib.sha256(blob).hexdigest() == entry["sha256"]
        lines = blob.decode().splitlines()
        assert len(lines) == entry["cases"] >= 7
        for line in lines:  # compact, sorted keys, strict JSON: re-encoding gives the same line
            assert json.dumps(json.loads(line), sort_keys=True, separators=(",", ":"), allow_nan=False) == line
    # every float parses back to the float64 that was generated (repr round-trips)
    assert read_vectors(tmp_path).cases == build_vectors(7, 3).cases


def test_read_rejects_tampering_and_other_versions(tmp_path: Path) -> None:
    write_vectors(tmp_path, count=2, seed=5)
    sampled = tmp_path / "sampled.jsonl"
    original = sampled.read_bytes()
    sampled.write_bytes(original.replace(b'"accepted":', b'"accepted": ', 1))
    with pytest.raises(VectorError, match="sha256"):
        read_vectors(tmp_path)
    sampled.write_bytes(original)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["protocol_version"] = 2
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(VectorError, match="protocol_version"):
        read_vectors(tmp_path)
    with pytest.raises(VectorError, match="cannot read"):
        read_vectors(tmp_path / "missing")


def test_format_readme_is_written_and_in_sync(tmp_path: Path) -> None:
    write_vectors(tmp_path, count=1, seed=1)
    assert (tmp_path / "FORMAT.md").read_text() == FORMAT_MARKDOWN == (REPO / "spec" / "VECTORS.md").read_text()
    for kind in KINDS:
        assert f"`{kind}.jsonl`" in FORMAT_MARKDOWN


# -----------------------------------------------------------------------------------------------
# deliberate edge cases


def test_sampled_edge_cases_are_present(vectors: VectorSet) -> None:
    cases = vectors.cases["sampled"]
    tags = {t for c in cases for t in c["tags"]}
    for wanted in (
        "zeros_in_q",
        "p_equals_q",
        "one_hot_p",
        "one_hot_q",
        "ties",
        "last_vocab_id",
        "k1",
        "k8",
        "accept_boundary",
        "cdf_boundary",
        "u_zero",
        "zero_residual",
        "subnormal_residual",
        "invalid",
    ):
        assert wanted in tags, wanted
    valid = _valid(cases)
    ks = {len(c["input"]["drafts"]) for c in valid}
    assert {1, 8} <= ks
    vocab = [len(c["input"]["p"][0]) for c in valid]
    assert any(c["expected"]["token"] == v - 1 for c, v in zip(valid, vocab)), "no case emits the last vocab id"
    assert any(c["expected"]["kind"] == "bonus" and c["expected"]["accepted"] == 8 for c in valid)
    assert any(c["expected"]["kind"] == "repair" and c["expected"]["accepted"] == 7 for c in valid)
    for c in valid:  # zeros in q actually occur, and p == q rows are bit-identical
        if "zeros_in_q" in c["tags"]:
            assert any(v == 0.0 for row in c["input"]["q"] for v in row)
        if "p_equals_q" in c["tags"]:
            k = len(c["input"]["drafts"])
            assert c["input"]["p"][:k] == c["input"]["q"]
            assert c["expected"] == {"accepted": k, "token": c["expected"]["token"], "kind": "bonus"}


def test_greedy_and_rows_edge_cases_are_present(vectors: VectorSet) -> None:
    greedy = _valid(vectors.cases["greedy"])
    assert {1, 8} <= {len(c["input"]["drafts"]) for c in greedy}
    tied = [c for c in greedy if "ties" in c["tags"]]
    assert tied and all(
        c["expected"]["token"] == exact.argmax([Fraction(v) for v in c["input"]["p"][c["expected"]["accepted"]]])
        for c in tied
    )
    rows = vectors.cases["rows"]
    assert {1, 8} <= {len(c["input"]["drafts"]) for c in rows}
    assert {"greedy", "sampled"} == {c["expected"]["mode"] for c in rows}
    for c in rows:
        q = c["expected"]["q"]
        for i, x in enumerate(c["input"]["drafts"]):
            assert q[i][x] > 0, "a draft token must have positive mass in the law it was drawn from"
        if "greedy_draft" in c["tags"]:
            assert all(sorted(row) == [0.0] * (len(row) - 1) + [1.0] for row in q)


def test_invalid_cases_and_only_they_expect_an_error(vectors: VectorSet) -> None:
    for case in vectors.all_cases():
        assert bool(case["expected"].get("error")) == ("invalid" in case["tags"]), case["id"]


# -----------------------------------------------------------------------------------------------
# expected outputs against independent oracles


def _fractions(rows: list[list[float]]) -> list[tuple[Fraction, ...]]:
    return [tuple(Fraction(v) for v in row) for row in rows]


def test_sampled_expectations_equal_the_exact_rational_protocol(vectors: VectorSet) -> None:
    """verispec.spec.exact.protocol_verdict runs the protocol in Fractions. Edge cases are dyadic (every
    float step exact); random cases agree unless a product or running sum rounds across a
    comparison, which these fixed cases do not do."""
    for case in _valid(vectors.cases["sampled"]):
        inp = case["input"]
        want = exact.protocol_verdict(
            _fractions(inp["p"]), _fractions(inp["q"]), tuple(inp["drafts"]), [Fraction(u) for u in inp["uniforms"]]
        )
        got = case["expected"]
        assert (got["accepted"], got["token"], got["kind"]) == want, case["id"]


def test_greedy_expectations_equal_the_exact_greedy_law(vectors: VectorSet) -> None:
    for case in _valid(vectors.cases["greedy"]):
        inp = case["input"]
        law = exact.greedy_verdict_law(_fractions(inp["p"]), [], tuple(inp["drafts"]))
        got = case["expected"]
        assert law == {(got["accepted"], got["token"], got["kind"]): 1}, case["id"]


def test_target_law_expectations_are_distributions_on_the_stated_support(vectors: VectorSet) -> None:
    for case in vectors.cases["target_law"]:
        probs = case["expected"]["probs"]
        assert len(probs) == len(case["input"]["logits"]) and case["tolerance"] == {"probs": 1e-6}
        assert abs(math.fsum(probs) - 1.0) < 1e-12 and min(probs) >= 0.0
        for token, bias in case["input"]["params"]["logit_bias"]:
            if bias == "-inf":
                assert probs[token] == 0.0, case["id"]
        if case["input"]["params"]["temperature"] == 0.0:
            assert sorted(probs)[-1] == 1.0 and sum(probs) == 1.0


def test_conformal_expectations_by_fraction_ceiling(vectors: VectorSet) -> None:
    for case in _valid(vectors.cases["conformal_index"]):
        n, q = case["input"]["n"], Fraction(case["input"]["q"])
        k = math.ceil((n + 1) * q)  # math.ceil of a Fraction is exact
        assert case["expected"]["index"] == (k if k <= n else None), case["id"]


def test_gate_expectations_by_the_float_formula(vectors: VectorSet) -> None:
    """admit iff fl(fl(Q + slack) + fl(Q + slack)) < margin in the dtype, default slack 8 ulp(Q)."""
    for case in _valid(vectors.cases["gate"]):
        inp = case["input"]
        if inp["gate"] == "margin":
            assert case["expected"]["admit"] == (inp["margin"] > inp["threshold"])
            continue
        dtype = np.float32 if inp["dtype"] == "float32" else np.float64
        q = dtype(inp["quantile"])
        slack = dtype(8) * np.spacing(q) if inp["slack"] is None else dtype(inp["slack"])
        with np.errstate(over="ignore"):
            bound = dtype(q + slack)
            admit = bool(dtype(bound + bound) < dtype(inp["margin"]))
        assert case["expected"]["admit"] == admit, case["id"]


@pytest.mark.oracle
def test_dequantize_expectations_bit_exact_vs_gguf_py(vectors: VectorSet) -> None:
    import gguf  # the dev extra installs it: a missing oracle fails, it never skips

    from verispec.reference.quants import block_layout

    types_seen = set()
    for case in vectors.cases["dequantize"]:
        inp = case["input"]
        kind = gguf.GGMLQuantizationType(inp["ggml_type"])
        assert kind.name == inp["type_name"]
        raw = np.frombuffer(bytes.fromhex(inp["raw_hex"]), dtype=np.uint8)
        blocks = raw.reshape(-1, block_layout(inp["ggml_type"])[1])
        theirs = np.asarray(gguf.quants.dequantize(blocks, kind), dtype=np.float32).reshape(-1)
        assert [format(int(b), "08x") for b in theirs.view(np.uint32)] == case["expected"]["bits"], case["id"]
        types_seen.add(inp["type_name"])
    assert {
        "F32",
        "F16",
        "BF16",
        "Q4_0",
        "Q4_1",
        "Q5_0",
        "Q5_1",
        "Q8_0",
        "Q2_K",
        "Q3_K",
        "Q4_K",
        "Q5_K",
        "Q6_K",
    } <= types_seen


# -----------------------------------------------------------------------------------------------
# the comparison rule


def test_compare_exact_tolerant_and_error_fields() -> None:
    verdict = {"expected": {"accepted": 1, "token": 2, "kind": "bonus"}, "tolerance": {}}
    assert compare(verdict, {"accepted": 1, "token": 2, "kind": "bonus"}) is None
    assert "token" in (compare(verdict, {"accepted": 1, "token": 3, "kind": "bonus"}) or "")
    assert "lacks" in (compare(verdict, {"accepted": 1, "token": 2}) or "")
    assert "rejected a valid input" in (compare(verdict, {"error": "no"}) or "")
    assert compare(verdict, {"accepted": True, "token": 2, "kind": "bonus"}) is not None  # bool is not 1
    assert compare(verdict, {"accepted": 1, "token": 2.0, "kind": "bonus"}) is not None  # nor is 2.0 an id
    law = {"expected": {"probs": [0.25, 0.0, 0.75]}, "tolerance": {"probs": 1e-6}}
    assert compare(law, {"probs": [0.2500005, 0.0, 0.7499995]}) is None
    assert "zero pattern" in (compare(law, {"probs": [0.25, 1e-9, 0.75 - 1e-9]}) or "")
    assert "tolerance" in (compare(law, {"probs": [0.251, 0.0, 0.749]}) or "")
    assert "list of 3" in (compare(law, {"probs": [0.25, 0.75]}) or "")
    invalid = {"expected": {"error": True}, "tolerance": {}}
    assert compare(invalid, {"error": "bad row"}) is None
    assert "rejected" in (compare(invalid, {"accepted": 0, "token": 0, "kind": "repair"}) or "")
    bits = {"expected": {"bits": ["80000000"]}, "tolerance": {}}
    assert compare(bits, {"bits": ["00000000"]}) is not None  # -0.0 is not +0.0


def test_bad_count_is_a_typed_error() -> None:
    with pytest.raises(VerispecError):
        build_vectors(-1)
