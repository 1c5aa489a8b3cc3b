"""A calibration that was tampered with is refused before the model loads.

Each case edits a real (synthetic-records) artifact the way an attacker or a careless hand would:
thresholds calibration cannot produce (-inf / negative residual quantiles, negative margins, a
finite threshold where too few prompts allow only +inf), q outside (0, 1), derived fields that no
longer follow from q, counts that do not add up, a lens zeroed with its sha256 field recomputed,
a lens of the wrong shape, a re-sealed edit under a key, an unsigned artifact under a key. Every
one must raise CalibrationError on load; the untouched artifact must load.

In-range forgeries, re-sealed without a key (a margin threshold of -inf or 0, a residual
quantile of 0, a consistently edited q or prompt count, an edited agreement), are refused
because every threshold is recomputed from the calibration scores the artifact carries; edited
scores are refused where they are not scores. What an unkeyed artifact can still be fooled by,
forged scores with their thresholds recomputed, or a non-zero lens swapped in and re-sealed,
is shown to load without a key and to be refused with one.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.calibration_records import artifact, edit, synthetic_records
from verispec.reference.calibration import Calibration, build
from verispec.reference.calibration_seal import KEY_ENV, SEAL_FIELD
from verispec.reference.early_exit import Lens
from verispec.reference.errors import CalibrationError

KEY = "k" * 32


def depth0(raw: dict[str, Any], kind: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = raw["depths"][0] if kind is None else raw["kinds"][kind]["depths"][0]
    return entry


def test_the_untouched_artifact_loads(tmp_path: Path) -> None:
    cal = Calibration.load(artifact(tmp_path), "b" * 64)
    assert cal.lens is not None and cal.n_prompts == 120


RESEALED_EDITS: dict[str, Callable[[dict[str, Any]], None]] = {
    "margin -inf -> -5": lambda raw: depth0(raw).update(margin_threshold=-5.0),
    "halfrange quantile -inf": lambda raw: depth0(raw).update(halfrange_quantile="-inf"),
    "supnorm quantile negative": lambda raw: depth0(raw, "chat").update(supnorm_quantile=-0.5),
    "q = 1": lambda raw: raw.update(q="1"),
    "q edited, alpha kept": lambda raw: raw.update(q="1/2"),
    "alpha edited": lambda raw: raw.update(alpha="1/2"),
    "n_prompts edited": lambda raw: raw.update(n_prompts=raw["n_prompts"] + 50),
    "min_prompts edited": lambda raw: raw.update(min_prompts=1),
    "kind n edited": lambda raw: raw["kinds"]["chat"].update(n=raw["kinds"]["chat"]["n"] + 1),
    "depth order": lambda raw: [d.update(depth=9 - d["depth"]) for d in raw["depths"]],
    "finite threshold with too few prompts": lambda raw: (
        raw.update(n_prompts=10, n=50),
        raw["kinds"]["chat"].update(n_prompts=5, n=25),
        raw["kinds"]["code"].update(n_prompts=5, n=25),
    ),
}


def _consistent_q(raw: dict[str, Any], q: str) -> None:
    """q and every field derived from it edited together, as an attacker who knows the format would."""
    from fractions import Fraction

    from verispec.reference.conformal import min_prompts

    level = Fraction(q)
    k = len(raw["layers"])
    need = min_prompts(1 - level, k)
    raw.update(q=str(level), alpha=str(1 - level), alpha_per_depth=str((1 - level) / k), min_prompts=need)
    for entry in raw["kinds"].values():
        entry.update(min_prompts=need, admits=entry["n_prompts"] >= need)


def _consistent_prompts(raw: dict[str, Any]) -> None:
    """Ten more calibration prompts claimed, the per-kind counts adding up."""
    raw["n_prompts"] += 10
    raw["kinds"]["chat"]["n_prompts"] += 10


IN_RANGE_FORGERIES: dict[str, Callable[[dict[str, Any]], None]] = {
    "margin threshold -inf": lambda raw: depth0(raw).update(margin_threshold="-inf"),
    "margin threshold 0": lambda raw: depth0(raw).update(margin_threshold=0.0),
    "chat margin threshold 0": lambda raw: depth0(raw, "chat").update(margin_threshold=0.0),
    "halfrange quantile 0": lambda raw: depth0(raw).update(halfrange_quantile=0.0),
    "code supnorm quantile 0": lambda raw: depth0(raw, "code").update(supnorm_quantile=0.0),
    "q edited with everything derived from it": lambda raw: _consistent_q(raw, "4/5"),
    "n_prompts edited, kinds adding up": _consistent_prompts,
    "agreement edited": lambda raw: depth0(raw).update(agreement=1.0),
    "steps per kind edited": lambda raw: raw["prompts"].update(chat=raw["prompts"]["chat"] + 1),
}


@pytest.mark.parametrize("name", sorted(IN_RANGE_FORGERIES))
def test_a_resealed_in_range_forgery_is_refused_by_recomputing(tmp_path: Path, name: str) -> None:
    path = artifact(tmp_path)
    edit(path, IN_RANGE_FORGERIES[name])
    with pytest.raises(CalibrationError) as caught:
        Calibration.load(path, "b" * 64)
    message = str(caught.value)
    assert "\n" not in message and "does not match its contents" not in message
    assert "does not follow from the calibration scores" in message or "do not add up" in message or "give" in message


def _records(raw: dict[str, Any], name: str) -> np.ndarray[Any, Any]:
    entry = raw["records"][name]
    return np.frombuffer(base64.b64decode(entry["base64"]), dtype=entry["dtype"]).reshape(entry["shape"]).copy()


def _store(raw: dict[str, Any], name: str, values: np.ndarray[Any, Any]) -> None:
    raw["records"][name]["base64"] = base64.b64encode(values.tobytes()).decode()


RECORD_EDITS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "records removed": (lambda raw: raw.pop("records"), "carries no calibration records"),
    "a negative score": (lambda raw: _store(raw, "halfrange", _records(raw, "halfrange") * -1), "not a score"),
    "an infinite margin": (
        lambda raw: _store(raw, "margins", _records(raw, "margins") + np.float32("inf")),
        "not a score",
    ),
    "a flip of 2": (lambda raw: _store(raw, "flips", _records(raw, "flips") * 2), "other than 0 and 1"),
    "a truncated array": (
        lambda raw: raw["records"]["supnorm"].update(base64=raw["records"]["supnorm"]["base64"][:-8]),
        "not base64",
    ),
    "not base64": (lambda raw: raw["records"]["prompt"].update(base64="!!!!"), "not base64"),
    "another shape": (lambda raw: raw["records"]["margins"].update(shape=[1, 600]), "must be <f4 of shape"),
    "another dtype": (lambda raw: raw["records"]["margins"].update(dtype="<f8"), "must be <f4 of shape"),
    "a kind outside its names": (lambda raw: _store(raw, "kind", _records(raw, "kind") + 5), "outside its"),
    "a prompt left without steps": (lambda raw: _store(raw, "prompt", _records(raw, "prompt") * 2), "has no tokens"),
    "scores of one step edited": (
        lambda raw: _store(raw, "margins", _records(raw, "margins") * np.float32(0.5)),
        "does not follow from the calibration scores",
    ),
}


@pytest.mark.parametrize("name", sorted(RECORD_EDITS))
def test_resealed_edited_records_are_refused(tmp_path: Path, name: str) -> None:
    change, why = RECORD_EDITS[name]
    path = artifact(tmp_path)
    edit(path, change)
    with pytest.raises(CalibrationError, match=why) as caught:
        Calibration.load(path, "b" * 64)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 400


def test_a_zeroed_lens_resealed_is_refused(tmp_path: Path) -> None:
    path = artifact(tmp_path)
    raw = json.loads(path.read_text())
    lens_path = path.parent / raw["lens"]["file"]
    with np.load(lens_path) as data:
        arrays = {name: np.zeros_like(data[name]) if name == "weight" else data[name] for name in data.files}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    lens_path.write_bytes(buffer.getvalue())
    raw["lens"]["sha256"] = hashlib.sha256(buffer.getvalue()).hexdigest()
    path.write_text(json.dumps(raw))
    edit(path, lambda raw: None)  # the seal recomputed over the zeroed lens
    with pytest.raises(CalibrationError, match="ignores its input"):
        Calibration.load(path)


def test_forged_scores_with_recomputed_thresholds_fool_only_an_unkeyed_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The limit, stated in docs/early-exit.md: an artifact built by calibration's own code from
    scores that were never measured (here: every residual 0, so the quantiles are 0 and every
    token would exit) is consistent, so without a key it loads; with a key it does not."""
    rng = np.random.default_rng(3)
    lens = Lens(
        (3, 5), rng.standard_normal((2, 4, 4)).astype(np.float32), rng.standard_normal((2, 4)).astype(np.float32)
    )
    forged = synthetic_records(n_prompts=120, kinds=("chat", "code"))
    forged.halfrange[:] = 0
    cal = build(forged, q="0.9", model_sha256="b" * 64, model_name="m", n_layer=6, lens=lens, n_lens=7, ridge=0.5)
    path = tmp_path / "cal.json"
    cal.save(path)  # no key: an unkeyed seal anyone can make
    loaded = Calibration.load(path, "b" * 64)
    assert all(d.halfrange_quantile == 0 for d in loaded.depths)  # producible, from those scores
    monkeypatch.setenv(KEY_ENV, KEY)
    with pytest.raises(CalibrationError, match="not signed"):
        Calibration.load(path, "b" * 64)


@pytest.mark.parametrize("name", sorted(RESEALED_EDITS))
def test_a_resealed_out_of_range_edit_is_refused(tmp_path: Path, name: str) -> None:
    path = artifact(tmp_path)
    edit(path, RESEALED_EDITS[name])
    with pytest.raises(CalibrationError) as caught:
        Calibration.load(path, "b" * 64)
    assert "\n" not in str(caught.value) and "does not match its contents" not in str(
        caught.value
    )  # by range, not the seal


def test_an_edit_without_resealing_is_refused_by_the_seal(tmp_path: Path) -> None:
    path = artifact(tmp_path)
    edit(path, lambda raw: depth0(raw).update(agreement=0.25), reseal=False)  # in range: only the seal sees it
    with pytest.raises(CalibrationError, match="seal does not match"):
        Calibration.load(path)


def test_a_changed_lens_with_its_sha256_recomputed_is_refused_by_the_seal(tmp_path: Path) -> None:
    """A lens halved (still a plausible lens: no range check can refuse it) with the sha256 field
    it carries about itself recomputed: the seal over both files' contents refuses it; re-sealed
    too, only a key does (the limit of an unkeyed seal)."""
    path = artifact(tmp_path)
    raw = json.loads(path.read_text())
    lens_path = path.parent / raw["lens"]["file"]
    with np.load(lens_path) as data:
        arrays = {name: data[name] * np.float32(0.5) if name == "weight" else data[name] for name in data.files}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    lens_path.write_bytes(buffer.getvalue())
    raw["lens"]["sha256"] = hashlib.sha256(buffer.getvalue()).hexdigest()  # the field the file carries about itself
    path.write_text(json.dumps(raw))
    with pytest.raises(CalibrationError, match="seal does not match"):
        Calibration.load(path)
    edit(path, lambda raw: None)  # re-sealed over the changed lens: without a key nothing can tell
    assert Calibration.load(path).lens is not None


def test_a_lens_of_the_wrong_shape_is_refused_at_load(tmp_path: Path) -> None:
    path = artifact(tmp_path)
    raw = json.loads(path.read_text())
    lens_path = path.parent / raw["lens"]["file"]
    buffer = io.BytesIO()
    np.savez(buffer, depths=np.array([3, 5]), weight=np.ones((2, 4, 3), np.float32), bias=np.ones((2, 4), np.float32))
    lens_path.write_bytes(buffer.getvalue())
    raw["lens"]["sha256"] = hashlib.sha256(buffer.getvalue()).hexdigest()
    path.write_text(json.dumps(raw))
    with pytest.raises(CalibrationError, match="expected"):
        Calibration.load(path)


def test_an_artifact_without_a_seal_is_refused(tmp_path: Path) -> None:
    path = artifact(tmp_path)
    edit(path, lambda raw: raw.pop(SEAL_FIELD), reseal=False)
    with pytest.raises(CalibrationError, match="no seal"):
        Calibration.load(path)


def test_with_a_key_only_artifacts_signed_with_it_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for folder in "abc":
        (tmp_path / folder).mkdir()
    unsigned = artifact(tmp_path / "a")
    monkeypatch.setenv(KEY_ENV, KEY)
    with pytest.raises(CalibrationError, match="not signed"):
        Calibration.load(unsigned)
    signed = artifact(tmp_path / "b")  # saved while the key is set: signed
    assert Calibration.load(signed).n_prompts == 120
    edit(signed, lambda raw: depth0(raw).update(agreement=0.25), reseal=False)
    with pytest.raises(CalibrationError, match="signature does not match"):
        Calibration.load(signed)
    monkeypatch.setenv(KEY_ENV, "another key of 32 bytes........")
    other = artifact(tmp_path / "c")
    monkeypatch.setenv(KEY_ENV, KEY)
    with pytest.raises(CalibrationError, match="signature does not match"):
        Calibration.load(other)
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(CalibrationError, match="is signed"):
        Calibration.load(other)


def test_a_short_key_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = artifact(tmp_path)
    monkeypatch.setenv(KEY_ENV, "short")
    with pytest.raises(CalibrationError, match="at least"):
        Calibration.load(path)


def test_a_deeply_nested_or_huge_integer_artifact_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "cal.json"
    for text in ("[" * 10_000 + "]" * 10_000, '{"format": ' + "7" * 5000 + "}"):
        path.write_text(text)
        with pytest.raises(CalibrationError) as caught:
            Calibration.load(path)
        assert "\n" not in str(caught.value)
