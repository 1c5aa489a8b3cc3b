"""Per-test CPU profile of the test suite: a pytest plugin, and a ranking of what it wrote.

The gate (`make test`) is CPU-bound on its two xdist workers, so its wall time follows the CPU the
tests spend; this says where that CPU goes. Load it from the repository root, in-process or under
the gate's xdist workers (``-p`` reaches each worker; every worker appends whole lines to the same
file, each line one test)::

    CPUPROF_OUT=/tmp/cpu.jsonl PYTHONPATH=. python -m pytest -n 0 -q -p lab.measure.cpu_profile tests/...
    CPUPROF_OUT=/tmp/cpu.jsonl PYTHONPATH=. python -m pytest -n auto --dist loadgroup -p lab.measure.cpu_profile
    python -m lab.measure.cpu_profile /tmp/cpu.jsonl          # rank by test, by file, by setup
    python -m lab.measure.cpu_profile /tmp/cpu.jsonl --costs tests/data/test_cpu.json

``--costs`` writes the costs that order the gate's xdist work (tests/conftest.py
``pytest_xdist_make_scheduler``: the longest units first): the CPU seconds of every file and of
every test that costs at least ``MIN_COST_S``.

Each line of ``$CPUPROF_OUT`` is one test: its node id, and the CPU seconds (``getrusage`` user +
system, of this process and of its waited-for children) spent in its setup, call and teardown, with
the wall seconds beside them. A module- or session-scoped fixture's cost lands in the setup of the
first test that asks for it (and its teardown in the last), so the ``setup`` ranking finds the
expensive shared loads. CPU, not wall time: the machine is shared, and CPU seconds are what two
workers have to share.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

PHASES = ("setup", "call", "teardown")


def cpu_seconds() -> float:
    """User + system CPU of this process and of its terminated, waited-for children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


_records: dict[str, dict[str, Any]] = {}


def _phase(item: pytest.Item, phase: str) -> Generator[None, None, None]:
    cpu, wall = cpu_seconds(), time.perf_counter()
    yield
    record = _records.setdefault(item.nodeid, {"nodeid": item.nodeid})
    record[phase] = round(cpu_seconds() - cpu, 4)
    record[f"{phase}_wall"] = round(time.perf_counter() - wall, 4)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    yield from _phase(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    yield from _phase(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    yield from _phase(item, "teardown")
    record = _records.pop(item.nodeid, None)
    out = os.environ.get("CPUPROF_OUT")
    if record is not None and out:
        with open(out, "a", encoding="utf-8") as file:
            file.write(json.dumps(record) + "\n")


def load(path: Path) -> list[dict[str, Any]]:
    """The records of a profile file (the last record of a node id wins)."""
    records: dict[str, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            records[record["nodeid"]] = record
    return list(records.values())


def total(record: dict[str, Any]) -> float:
    return sum(float(record.get(phase, 0.0)) for phase in PHASES)


def ranking(records: list[dict[str, Any]], top: int = 40) -> str:
    """The text report: the total, then the top tests, files and setups by CPU."""
    lines = [f"{len(records)} tests, {sum(map(total, records)):.1f} s CPU"]
    lines.append(f"\n-- top {top} tests (total = setup + call + teardown CPU s)")
    for record in sorted(records, key=total, reverse=True)[:top]:
        lines.append(f"{total(record):8.1f}  {record.get('setup', 0):7.1f} {record['nodeid']}")
    by_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for record in records:
        entry = by_file[record["nodeid"].split("::", 1)[0]]
        entry[0] += total(record)
        entry[1] += 1
    lines.append(f"\n-- top {top} files (CPU s, tests)")
    for path, (cpu, count) in sorted(by_file.items(), key=lambda kv: kv[1][0], reverse=True)[:top]:
        lines.append(f"{cpu:8.1f}  {int(count):5d}  {path}")
    lines.append(f"\n-- top {top} setups (shared fixture loads land here)")
    for record in sorted(records, key=lambda r: float(r.get("setup", 0)), reverse=True)[:top]:
        lines.append(f"{float(record.get('setup', 0)):8.1f}  {record['nodeid']}")
    return "\n".join(lines)


MIN_COST_S = 5.0  # a test listed by itself in the costs file: the rest only move within their file's cost


def costs(records: list[dict[str, Any]], provenance: str) -> dict[str, Any]:
    """The scheduler's cost table: CPU seconds per file, and per test of at least ``MIN_COST_S``."""
    files: dict[str, float] = defaultdict(float)
    for record in records:
        files[record["nodeid"].split("::", 1)[0]] += total(record)
    return {
        "provenance": provenance,
        "files": {path: round(cpu, 1) for path, cpu in sorted(files.items()) if cpu >= 0.5},
        "tests": {
            r["nodeid"]: round(total(r), 1)
            for r in sorted(records, key=lambda r: r["nodeid"])
            if total(r) >= MIN_COST_S
        },
    }


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 3) or (len(argv) == 3 and argv[1] != "--costs"):
        print("usage: python -m lab.measure.cpu_profile PROFILE.jsonl [--costs OUT.json]", file=sys.stderr)
        return 2
    records = load(Path(argv[0]))
    if len(argv) == 3:
        provenance = f"python -m lab.measure.cpu_profile {argv[0]} --costs: {len(records)} tests"
        Path(argv[2]).write_text(json.dumps(costs(records, provenance), indent=1) + "\n", encoding="utf-8")
    else:
        print(ranking(records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
