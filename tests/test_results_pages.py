"""docs/results/ is generated from lab/measurements/ by `python -m lab.results`, byte for byte.

The results pages are the only place dated measurements live; a page edited by hand, a page left
stale after a new measurement was saved, or a page whose measurement is gone all fail here. The
generator runs no model (the pages are functions of the saved JSON and records), so this costs a
few seconds of CPU (the early-exit diagnosis recalibrates from the saved per-step records).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lab import results

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "docs" / "results"


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("results")
    assert results.main(["--out", str(out)]) == 0
    return out


def test_committed_pages_equal_the_regenerated_ones_byte_for_byte(regenerated: Path) -> None:
    generated = sorted(p.name for p in regenerated.glob("*.md"))
    committed = sorted(p.name for p in COMMITTED.glob("*.md"))
    assert committed == generated, "docs/results/ has pages the generator does not make, or lacks some"
    for name in generated:
        assert (COMMITTED / name).read_bytes() == (regenerated / name).read_bytes(), (
            f"docs/results/{name} is stale: run `python -m lab.results`"
        )


def test_every_page_is_marked_generated_and_states_its_provenance(regenerated: Path) -> None:
    for page in regenerated.glob("*.md"):
        text = page.read_text()
        assert text.startswith(results.BANNER), page.name
        if page.name != "index.md":
            assert "## Provenance" in text, page.name
            sources = text.split("## Provenance")[1].split("\n- `lab/measurements/")[1:]  # one per saved file
            assert sources, page.name
            for field, spellings in (
                ("date", ("date: ", "started utc: ")),
                ("machine", ("machine: ",)),
                ("command", ("command: `",)),
                ("commit", ("commit: ",)),
            ):
                missing = [s.split("`")[0] for s in sources if not any(w in s for w in spellings)]
                assert not missing, f"{page.name}: no {field} for {missing}"


def test_every_saved_measurement_reaches_a_page(regenerated: Path) -> None:
    text = "\n".join(p.read_text() for p in regenerated.glob("*.md"))
    for saved in sorted(results.MEASUREMENTS.glob("*.json")):
        assert f"lab/measurements/{saved.name}" in text, f"{saved.name} is on no results page"


def test_the_staleness_check_catches_an_edited_missing_or_extra_page(regenerated: Path, tmp_path: Path) -> None:
    generated = {p.name: p.read_text() for p in regenerated.glob("*.md")}  # what main() wrote
    for name, text in generated.items():
        (tmp_path / name).write_text(text)
    assert results.stale(tmp_path, generated) == []
    edited = tmp_path / "workload.md"
    edited.write_text(generated["workload.md"].replace("1.64", "1.65", 1))
    assert results.stale(tmp_path, generated) == ["workload.md"]
    edited.unlink()
    assert results.stale(tmp_path, generated) == ["workload.md"]
    edited.write_text(generated["workload.md"])
    (tmp_path / "old.md").write_text("a page no measurement makes\n")
    assert results.stale(tmp_path, generated) == ["old.md"]
