"""`verispec check`: the reference passes through both interfaces, the plain-Python example passes,
every mutant of spec/mutants.py served as a program fails, and broken programs (garbage, silence,
crashes, wrong ids) are failures with a clear message, never a crash of the checker.

Statistical sample sizes: the Python interface runs at full power (N from the power analysis,
TV bias 0.005 detected with power 0.99). Through a subprocess every draw crosses a pipe as JSON,
so the command-interface tests run the statistical properties at ``COMMAND_SCALE`` of N (the
reported power drops accordingly and is asserted to be what the report says); the vectors and the
deterministic properties run in full. `verispec check` itself defaults to scale 1.
"""

from __future__ import annotations

import importlib
import json
import math
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from verispec.reference.speculative import verify_greedy, verify_sampled, verify_sampled_batch
from verispec.spec.check import (
    CheckReport,
    CommandImplementation,
    PythonImplementation,
    as_verdict,
    property_names,
    run_check,
)
from verispec.spec.external import ExternalError, ProgramCannotStart
from verispec.spec.mutants import catalogue
from verispec.spec.properties import PROPERTY_NAMES, ReferencePipeline
from verispec.spec.statistics import ALPHA_BUDGET, POWER
from verispec.spec.vectors import DEFAULT_COUNT, DEFAULT_SEED, KINDS, VectorSet, build_vectors

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
REFERENCE_CMD = f"{PY} -m verispec.spec.external --reference"
EXAMPLE_CMD = f"{PY} {REPO / 'examples' / 'external_verifier.py'}"
COMMAND_SCALE = 0.02  # of the statistical N through a pipe (see the module docstring)
STATISTICAL = [name for name in PROPERTY_NAMES if name.startswith("stat_")]


@pytest.fixture(scope="module")
def vectors() -> VectorSet:
    return build_vectors(DEFAULT_COUNT, DEFAULT_SEED)


def _statuses(report: CheckReport) -> dict[str, str]:
    return {p.name: p.status for p in report.properties}


def _run_command(command: str, vectors: VectorSet, **kwargs: object) -> CheckReport:
    impl = CommandImplementation(command, timeout=30.0)
    try:
        return run_check(impl, vectors, **kwargs)  # type: ignore[arg-type]
    finally:
        impl.close()


# -----------------------------------------------------------------------------------------------
# what must pass


def test_reference_passes_through_the_python_interface_at_full_power(vectors: VectorSet) -> None:
    impl = PythonImplementation(
        verify_sampled, batch=verify_sampled_batch, greedy=verify_greedy, pipeline=ReferencePipeline
    )
    report = run_check(impl, vectors)
    assert report.passed, [p for p in report.properties if p.status == "failed"]
    statuses = _statuses(report)
    assert [p.name for p in report.properties] == property_names()
    # the Python interface covers the verifier ops; the other vector kinds are skipped, not passed
    assert {k for k in KINDS if statuses[f"vectors_{k}"] == "passed"} == {"sampled", "sampled_large", "greedy", "rows"}
    assert all(statuses[name] == "passed" for name in PROPERTY_NAMES)
    for outcome in report.properties:
        if outcome.name in STATISTICAL:
            # toy laws: N >= 500,000 against TV 0.005; LLM-scale strata: N >= 20,000 against TV 0.03,
            # N >= 2,000 against TV 0.1 at V = 262,144 (spec/strata.py STRATA_TV_V262144: for cost)
            least = 500_000
            if outcome.name.startswith("stat_strata_"):
                least = 2_000 if outcome.name == "stat_strata_tail_v262144" else 20_000
            assert outcome.power >= POWER and outcome.alpha == ALPHA_BUDGET[outcome.name] and outcome.n >= least


def test_reference_passes_through_the_command_interface(vectors: VectorSet) -> None:
    report = _run_command(REFERENCE_CMD, vectors, scale=COMMAND_SCALE, min_power=0)  # a reduced N, accepted
    assert report.passed, [p for p in report.properties if p.status == "failed"]
    assert set(_statuses(report).values()) == {"passed"}  # every vector kind and every property
    for outcome in report.properties:
        if outcome.name in STATISTICAL:
            assert 0 < outcome.power < POWER and outcome.n >= 1000  # reduced N, honestly reported


def test_example_external_verifier_passes(vectors: VectorSet) -> None:
    """examples/external_verifier.py: plain Python from the protocol text, no verispec, no numpy."""
    source = (REPO / "examples" / "external_verifier.py").read_text()
    imports = {line.split()[1] for line in source.splitlines() if line.startswith(("import ", "from "))}
    assert imports == {"__future__", "json", "math", "sys"}
    report = _run_command(EXAMPLE_CMD, vectors, scale=COMMAND_SCALE, min_power=0)
    assert report.passed, [p for p in report.properties if p.status == "failed"]
    statuses = _statuses(report)
    assert statuses["vectors_gate"] == statuses["vectors_dequantize"] == "skipped"  # not offered
    assert all(
        statuses[f"vectors_{k}"] == "passed" for k in ("sampled", "greedy", "rows", "target_law", "conformal_index")
    )
    assert all(statuses[name] == "passed" for name in PROPERTY_NAMES)


# -----------------------------------------------------------------------------------------------
# what must fail


@pytest.mark.parametrize("mutant", [m.name for m in catalogue()])
def test_every_mutant_served_as_a_command_is_rejected(mutant: str, vectors: VectorSet) -> None:
    report = _run_command(f"{PY} -m verispec.spec.external --mutant {mutant}", vectors, fail_fast=True)
    assert not report.passed
    assert report.properties[-1].status == "failed" and len(report.failed) == 1  # stopped at the first
    assert report.properties[-1].name.startswith("vectors_"), report.properties[-1]  # replay kills it


@pytest.mark.parametrize(
    "mutant", ["accept_on_equality", "acceptance_uniform_reused_for_repair", "draft_q_from_raw_logits"]
)
def test_the_spec_properties_alone_kill_mutants_through_the_wire(mutant: str, vectors: VectorSet) -> None:
    """Without the vectors: the spec's own properties, carried by the wire adapter (single,
    batch and rows requests), still reject mutants of each kind (boundary, draw, pipeline)."""
    report = _run_command(
        f"{PY} -m verispec.spec.external --mutant {mutant}", vectors, only=list(PROPERTY_NAMES), fail_fast=True
    )
    assert not report.passed and report.properties[-1].name in PROPERTY_NAMES


def test_a_broken_python_verifier_is_rejected(vectors: VectorSet) -> None:
    mutant = next(m for m in catalogue() if m.name == "accept_on_equality")
    report = run_check(PythonImplementation(mutant.verifier, batch=mutant.batch), vectors, fail_fast=False, scale=0.01)
    failed = {p.name for p in report.failed}
    assert "vectors_sampled" in failed and "protocol_boundaries" in failed
    assert _statuses(report)["pipeline_processors"] == "skipped"  # no pipeline given


_FAKES = {
    # a program that answers garbage
    "garbage": ("import sys\nfor line in sys.stdin:\n    print('hello', flush=True)\n", "not JSON"),
    # answers with the wrong id
    "wrong_id": (
        "import sys, json\nfor line in sys.stdin:\n    print(json.dumps({'id': 'x', 'output': {}}), flush=True)\n",
        "out of order",
    ),
    # never answers
    "silent": ("import sys, time\nfor line in sys.stdin:\n    time.sleep(60)\n", "within 1 s"),
    # answers once, then dies, complaining on stderr
    "crash": (
        "import sys, json\nr = json.loads(sys.stdin.readline())\nprint(json.dumps({'id': r['id'], 'error': 'no'}), flush=True)\n"
        "sys.stderr.write('boom: gone\\n')\nsys.exit(3)\n",
        "boom: gone",
    ),
    # offers nothing
    "unsupported": (
        "import sys, json\nfor line in sys.stdin:\n    r = json.loads(line)\n    print(json.dumps({'id': r['id'], 'unsupported': r['op']}), flush=True)\n",
        "every verifier must",
    ),
    # a verdict without its fields
    "fieldless": (
        "import sys, json\nfor line in sys.stdin:\n    r = json.loads(line)\n    print(json.dumps({'id': r['id'], 'output': {'token': 0}}), flush=True)\n",
        "lacks field",
    ),
}


@pytest.mark.parametrize("fake", sorted(_FAKES))
def test_broken_programs_fail_with_a_clear_message(fake: str, tmp_path: Path, vectors: VectorSet) -> None:
    source, message = _FAKES[fake]
    script = tmp_path / f"{fake}.py"
    script.write_text(source)
    impl = CommandImplementation(f"{PY} {script}", timeout=1.0)
    try:
        report = run_check(impl, vectors, only=["vectors_sampled", "vectors_greedy"])
    finally:
        impl.close()
    assert not report.passed
    first = report.failed[0]
    assert first.name == "vectors_sampled" and message in first.detail, first.detail
    assert len(report.properties) == 2  # the checker went on after the failure


def test_a_program_that_cannot_start_is_a_usage_error_not_a_verdict(tmp_path: Path, vectors: VectorSet) -> None:
    """Dying before its first answer ever (here: at once, complaining on stderr) is ProgramCannotStart."""
    script = tmp_path / "dead.py"
    script.write_text("import sys\nsys.stderr.write('boom: cannot start\\n')\nsys.exit(3)\n")
    impl = CommandImplementation(f"{PY} {script}", timeout=5.0)
    try:
        with pytest.raises(ProgramCannotStart, match="boom: cannot start"):
            run_check(impl, vectors, only=["vectors_sampled"])
    finally:
        impl.close()


def test_a_program_that_crashes_on_bad_input_fails_the_contract(tmp_path: Path, vectors: VectorSet) -> None:
    """Dying on an invalid input is not rejecting it: the contract needs an error response."""
    script = tmp_path / "fragile.py"
    script.write_text(
        "import sys, subprocess\n"
        f"ref = subprocess.Popen([{PY!r}, '-m', 'verispec.spec.external', '--reference'], stdin=subprocess.PIPE, stdout=subprocess.PIPE)\n"
        "for line in sys.stdin.buffer:\n"
        "    ref.stdin.write(line); ref.stdin.flush()\n"
        "    answer = ref.stdout.readline()\n"
        "    if b'\"error\"' in answer:\n"
        "        sys.exit(1)\n"
        "    sys.stdout.buffer.write(answer); sys.stdout.flush()\n"
    )
    impl = CommandImplementation(f"{PY} {script}", timeout=20.0)
    try:
        report = run_check(impl, vectors, only=["vectors_greedy", "contract"])
    finally:
        impl.close()
    assert _statuses(report) == {"vectors_greedy": "failed", "contract": "failed"}
    assert "exited" in report.failed[0].detail
    assert impl.wire.transport.restarts >= 1  # a fresh process served the next property


# -----------------------------------------------------------------------------------------------
# the CLI and small pieces


def test_cli_exit_status_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`verispec check` as a process once (the failing run: its exit status, its report on stdout,
    no progress line when stderr is not a terminal), the other runs through ``cli.main`` in this
    process (the same argument parsing, report and exit status; no interpreter start each)."""
    from verispec import cli

    def run(*args: str) -> tuple[int, str, str]:
        status = cli.main(["check", *args])
        out, err = capsys.readouterr()
        return status, out, err

    status, out, err = run(
        "--verifier-cmd", REFERENCE_CMD, "--only", "vectors_sampled", "vectors_greedy", "--count", "4", "--json"
    )
    assert status == 0, err
    report = json.loads(out)
    assert report["passed"] and [p["name"] for p in report["properties"]] == ["vectors_sampled", "vectors_greedy"]
    assert {"status", "n", "alpha", "power", "detail"} <= set(report["properties"][0])
    bad = subprocess.run(
        [PY, "-m", "verispec", "check", "--verifier-cmd", f"{PY} -m verispec.spec.external --mutant always_accept"]
        + ["--fail-fast", "--count", "4"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (
        bad.returncode == 1
        and "FAIL  vectors_sampled" in bad.stdout
        and "FAILED: not bit-exact with the protocol: vectors_sampled" in bad.stdout
    )
    assert "\r" not in bad.stderr  # no progress line when stderr is not a terminal
    assert bad.stdout.count("FAIL  ") == 1 and "vectors_greedy" not in bad.stdout  # --fail-fast stopped there
    assert cli.main(["vectors", "--out", str(tmp_path), "--count", "3"]) == 0
    capsys.readouterr()
    status, out, err = run(
        "--verifier",
        "verispec.reference.speculative:verify_sampled",
        "--vectors",
        str(tmp_path),
        "--only",
        "vectors_sampled",
        "contract",
    )
    assert status == 0 and "PASSED" in out, out + err
    status, out, err = run("--verifier", "verispec.reference.speculative:no_such_function")
    assert status == 2 and "no_such_function" in err


def test_python_verdict_forms() -> None:
    assert as_verdict((1, 2, "bonus"), "t").kind == "bonus"
    assert as_verdict({"accepted": 0, "token": 3, "kind": "repair"}, "t").token == 3
    assert as_verdict(verify_greedy([[0.0, 1.0], [1.0, 0.0]], [1]), "t").accepted == 1
    with pytest.raises(ExternalError):
        as_verdict((1, 2, "maybe"), "t")
    with pytest.raises(ExternalError):
        as_verdict(42, "t")


# -----------------------------------------------------------------------------------------------
# the per-row fast checks decide as the per-entry walks they stand in front of


def _nested(rng: "random.Random", atoms: list[object], depth: int) -> object:
    if depth == 0 or rng.random() < 0.4:
        return rng.choice(atoms)
    return [_nested(rng, atoms, depth - 1) for _ in range(rng.randint(0, 4))]


def test_the_reference_servers_finite_check_matches_its_element_walk() -> None:
    """spec/external/server.py decides a list of plain numbers from its type set: on random nests
    of numbers, markers, other strings and subclasses it raises exactly where, and with exactly
    the message, the element-by-element walk does."""
    from verispec.reference.errors import VerificationError
    from verispec.spec.external.server import check_finite, raise_first_marker

    class Text(str):
        pass

    class Items(list):  # type: ignore[type-arg]
        pass

    def outcome(check: Any, value: object) -> str | None:
        try:
            check(value)
        except VerificationError as exc:
            return str(exc)
        return None

    atoms: list[object] = [0.5, 1, "NaN", "Infinity", "-Infinity", "x", None, True, {"a": "NaN"}]
    atoms += [Text("NaN"), Items(["Infinity"]), float("nan"), 2**80]
    rng = random.Random(0)
    for _ in range(20_000):
        value = _nested(rng, atoms, 4)
        assert outcome(check_finite, value) == outcome(raise_first_marker, value), value


def test_the_example_verifiers_row_fast_path_accepts_only_what_its_entry_loop_accepts() -> None:
    """examples/external_verifier.py checks a row whole (type set, fsum, min) before its entry
    loop: it accepts only rows whose every entry is a finite number >= 0 (not a bool), and turns
    down such a row only when its fsum overflows (the entry loop then decides, as before)."""
    example: Any = importlib.import_module("examples.external_verifier")  # plain Python, untyped
    atoms: list[Any] = [0.0, -0.0, 0.5, 1, 0, -1, -1e-300, 5e-324, 1e308, 10**400, True, "x", None, [0.1]]
    atoms += [float("nan"), float("inf"), -float("inf")]
    rng = random.Random(1)
    for _ in range(50_000):
        row: list[Any] = [rng.choice(atoms) for _ in range(rng.randint(1, 5))]
        try:
            every_entry = all(example.is_number(v) and v >= 0 for v in row)
        except OverflowError:  # math.isfinite of a huge int: the entry loop raises as before
            every_entry = False
        if example.is_row_of_weights(row):
            assert every_entry, row
        elif every_entry:
            with pytest.raises(OverflowError):
                math.fsum(row)


def test_a_vector_sets_memoized_replay_lines_are_its_requests_encoding(vectors: VectorSet) -> None:
    """VectorSet.wire_lines: the first replay of a kind fills the memo with exactly what
    encode_line spells for each request, and a replay from the filled memo gets the same verdict."""
    from verispec.spec.check import replay_kind
    from verispec.spec.external import encode_line
    from verispec.spec.vectors.gen_large import as_sampled_case

    cases = vectors.cases["sampled"]
    lines: list[bytes] = []
    impl = CommandImplementation(REFERENCE_CMD, timeout=30.0)
    try:
        first = replay_kind(impl, "sampled", cases, lines)
        again = replay_kind(impl, "sampled", cases, lines)
    finally:
        impl.close()
    expanded = [as_sampled_case(case) for case in cases]
    assert lines == [encode_line({"id": c["id"], "op": c["op"], "input": c["input"]}) for c in expanded]
    assert first.status == again.status == "passed" and first.n == again.n == len(cases) > 0


class _RecordingTransport:
    """A transport that answers every batch item (accepted 0, token 0, repair) and keeps what it was sent."""

    command = "recording"

    def __init__(self) -> None:
        self.sent: list[tuple[list[dict[str, Any]], list[bytes] | None]] = []
        self.counter = 0

    def next_id(self, op: str) -> str:
        self.counter += 1
        return f"{op}#{self.counter}"

    def exchange(self, requests: list[dict[str, Any]], lines: list[bytes] | None = None) -> list[dict[str, Any]]:
        self.sent.append((list(requests), None if lines is None else list(lines)))
        answers = []
        for request in requests:
            n = len(request["input"]["drafts"])
            output = {"accepted": [0] * n, "token": [0] * n, "kind": ["repair"] * n}
            answers.append({"id": request["id"], "output": output})
        return answers


def test_batch_requests_with_memoized_rows_are_their_requests_encoding() -> None:
    """WireImplementation sends the JSON text of p and q memoized across calls (the same rows, V
    up to 262,144, are sent many times): every line is exactly what encode_line spells for its
    request, on a repeat of the same rows, on rows that differ only in the sign of a zero, with
    non-finite entries, per-item rows in groups, and in requests split at batch_items."""
    from verispec.spec.external import encode_line
    from verispec.spec.external.implementation import WireImplementation

    transport = _RecordingTransport()
    wire = WireImplementation(transport, batch_items=3)  # type: ignore[arg-type]
    rng = np.random.default_rng(7)
    p, q = rng.random((3, 11)), rng.random((2, 11))
    p[0, 4], q[1, 2] = -0.0, -0.0
    drafts = rng.integers(0, 11, size=(7, 2))
    uniforms = rng.random((7, 3))
    positive = p.copy()
    positive[0, 4] = 0.0  # equal to p as numbers, another spelling on the wire
    broken = p.copy()
    broken[1, 0], broken[2, 3] = np.nan, -np.inf
    other = p.copy()
    other[2, 5] += 0.25
    per_item = np.stack([p, p, other, p, other, p, p])  # two groups
    calls = [(p, q), (p, q), (positive, q), (broken, q), (per_item, q)]
    for rows, q_rows in calls:
        wire.verify_batch(rows, q_rows, drafts, uniforms)
    wire.verify_law_batch(p, q, drafts, seed=5)
    assert len(transport.sent) == len(calls) + 1
    for requests, lines in transport.sent:
        assert lines == [encode_line(request) for request in requests]
    assert b"-0.0" in transport.sent[0][1][0] and b"-0.0" in transport.sent[1][1][0]  # type: ignore[index]
    assert transport.sent[2][1][0].count(b"-0.0") == 1  # type: ignore[index]  # q's only
    assert b'"NaN"' in transport.sent[3][1][0] and b'"-Infinity"' in transport.sent[3][1][0]  # type: ignore[index]
    assert len(transport.sent[4][0]) == 3  # groups of 5 and 2 items, at most 3 a request: 3 + 2, 2
