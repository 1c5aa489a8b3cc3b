"""A seeded corpus of untrusted inputs: malformed answers, JSON documents, draft caches,
calibrations and misbehaving peers. Every case has a known right outcome, so a wrong verdict is
countable:

- a malformed answer must raise ExternalError (refused, so the property FAILS); the valid answer
  it was mutated from must be accepted unchanged;
- a JSON document must parse to what ``json.loads`` gives, or raise InputError, nothing else
  (no RecursionError, MemoryError, bare ValueError: a traceback is a failure);
- a mutated draft cache or calibration must load or raise its domain's typed error; one whose
  mutation is out of range must be refused;
- a misbehaving peer must end in ExternalError within its bound, its process group gone.

- a depth-mode block of generations (as an engine answers it and as a worker sends it) is read
  with every field of exactly its type: an id ``5.0``, ``"5"``, ``true`` or ``t + 0.5`` is refused;
- repeated generations (four random streams, stale blocks, an ignored seed) fail by the end of the
  block that holds the first repeat, and independent draws never do, even at a sharp law;
- a bad ``check-decoder`` flag value is a usage error (exit 2, one line) before any run.

Every family prints ``corpus FAMILY: N cases, W wrong verdicts, T tracebacks, H hangs, L leftovers``
and the module ends with one ``corpus fast|long total: ...`` line (shown without ``-s``).

The fast subset runs in the default test run (well under 30 s); ``VERISPEC_CORPUS_LONG=1`` runs
the long corpus (10x the seeds per family, every peer behaviour on every op, whole check runs of
every kind). Seeds are fixed: the same corpus every run.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.processes import group_gone
from verispec.reference.calibration import Calibration
from verispec.reference.errors import CalibrationError, DraftError, InputError
from verispec.reference.json_input import loads
from verispec.reference.suffix_draft import SuffixCache
from verispec.spec import answers
from verispec.spec.external import CommandTransport, ExternalError, WireImplementation, parse_verdict

LONG = os.environ.get("VERISPEC_CORPUS_LONG") == "1"
CASES = 20_000 if LONG else 2_000  # per answer family
FILES = 400 if LONG else 40  # per file family

# values that are never a token id or an accepted count, whatever V and k
NOT_AN_ID: tuple[Any, ...] = (-3, -1, 5.0, 5.5, "5", None, True, False, [1], {"t": 1}, 10**30, -(10**30), float("nan"))


def mutated_value(rng: random.Random, vocab: int) -> Any:
    return rng.choice([*NOT_AN_ID, vocab, vocab + 1, 2**63])


def valid_batch(rng: random.Random, n: int, k: int, vocab: int) -> dict[str, list[Any]]:
    return {
        "accepted": [rng.randrange(k + 1) for _ in range(n)],
        "token": [rng.randrange(vocab) for _ in range(n)],
        "kind": [rng.choice(["repair", "bonus"]) for _ in range(n)],
    }


def test_every_item_of_a_batch_answer_is_checked() -> None:
    rng = random.Random(20_261_201)
    wrong, tracebacks, cases, family = 0, 0, 2 * (CASES // 10), "batch answers"
    for _ in range(CASES // 10):
        n, k, vocab = rng.randrange(1, 60), rng.randrange(1, 9), rng.randrange(2, 300)
        output = valid_batch(rng, n, k, vocab)
        accepted, token, bonus = answers.batch_columns(output, n, k, vocab)
        assert accepted.tolist() == output["accepted"] and token.tolist() == output["token"]
        assert bonus.tolist() == [kind == "bonus" for kind in output["kind"]]
        bad = json.loads(json.dumps(output))
        field = rng.choice(["accepted", "token", "kind", "length"])
        item = rng.randrange(n)  # anywhere, not only the first item
        if field == "length":
            bad[rng.choice(["accepted", "token", "kind"])].append(0) if rng.random() < 0.5 else bad["token"].pop()
        elif field == "kind":
            bad["kind"][item] = rng.choice(["Repair", "", None, 1, "bonus "])
        elif field == "accepted":
            bad["accepted"][item] = rng.choice([-1, k + 1, *NOT_AN_ID[2:]])
        else:
            bad["token"][item] = mutated_value(rng, vocab)
        try:
            answers.batch_columns(bad, n, k, vocab)
            wrong += 1
        except ExternalError:
            pass
        except Exception:  # noqa: BLE001 (counted: any other exception is a traceback)
            tracebacks += 1
    _tally(family, cases, {"wrong verdicts": wrong, "tracebacks": tracebacks, "hangs": 0, "leftovers": 0})


def test_a_malformed_verdict_is_refused_and_a_valid_one_kept() -> None:
    rng = random.Random(7)
    wrong, tracebacks, cases, family = 0, 0, 2 * CASES, "verdicts"
    for _ in range(CASES):
        k, vocab = rng.randrange(1, 9), rng.randrange(2, 300)
        output: dict[str, Any] = {
            "accepted": rng.randrange(k + 1),
            "token": rng.randrange(vocab),
            "kind": rng.choice(["repair", "bonus"]),
        }
        verdict = parse_verdict(output, k=k, vocab=vocab)
        assert (verdict.accepted, verdict.token, verdict.kind) == (output["accepted"], output["token"], output["kind"])
        field = rng.choice(["accepted", "token", "kind", "missing"])
        if field == "missing":
            del output[rng.choice(["accepted", "token", "kind"])]
        elif field == "kind":
            output["kind"] = rng.choice(["", None, 0, "REPAIR"])
        elif field == "accepted":
            output["accepted"] = rng.choice([-1, k + 1, *NOT_AN_ID[2:]])
        else:
            output["token"] = mutated_value(rng, vocab)
        try:
            parse_verdict(output, k=k, vocab=vocab)
            wrong += 1
        except ExternalError:
            pass
        except Exception:  # noqa: BLE001 (counted: any other exception is a traceback)
            tracebacks += 1
    _tally(family, cases, {"wrong verdicts": wrong, "tracebacks": tracebacks, "hangs": 0, "leftovers": 0})


def test_decoder_samples_and_greedy_ids_are_checked_item_by_item() -> None:
    rng = random.Random(11)
    wrong, tracebacks, cases, family = 0, 0, 7 * (CASES // 10), "decoder samples and greedy ids"
    for _ in range(CASES // 10):
        n, m, vocab = rng.randrange(1, 40), rng.randrange(1, 4), rng.randrange(2, 500)
        samples = [[rng.randrange(vocab) for _ in range(rng.randrange(1, m + 1))] for _ in range(n)]
        assert answers.samples(samples, n, m, vocab) == samples
        bad = json.loads(json.dumps(samples))
        how = rng.choice(["token", "count", "length", "empty"])
        i = rng.randrange(n)
        if how == "token":
            bad[i][rng.randrange(len(bad[i]))] = mutated_value(rng, vocab)
        elif how == "count":
            bad.append([0]) if rng.random() < 0.5 else bad.pop()
        elif how == "length":
            bad[i] = [0] * (m + 1)
        else:
            bad[i] = []
        try:
            answers.samples(bad, n, m, vocab)
            wrong += 1
        except ExternalError:
            pass
        max_tokens, eog = rng.randrange(2, 20), {vocab - 1}
        ids = [rng.randrange(vocab - 1) for _ in range(max_tokens)]
        assert answers.greedy_ids(ids, max_tokens, vocab, eog) == ids
        short = ids[: rng.randrange(max_tokens)]  # stopped early without an end-of-generation id
        for bad_ids in (short, [*ids, 0], [*ids[:-1], mutated_value(rng, vocab)], None):
            try:
                answers.greedy_ids(bad_ids, max_tokens, vocab, eog)
                wrong += 1
            except ExternalError:
                pass
            except Exception:  # noqa: BLE001 (counted: any other exception is a traceback)
                tracebacks += 1
    _tally(family, cases, {"wrong verdicts": wrong, "tracebacks": tracebacks, "hangs": 0, "leftovers": 0})


def random_json(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 6 or roll < 0.3:
        return rng.choice([0, -1, 1.5, "s", '\\u00e9"[', True, None, 10**20])
    if roll < 0.65:
        return [random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {f"k{i}": random_json(rng, depth + 1) for i in range(rng.randrange(4))}


def hostile_json(rng: random.Random) -> bytes:
    deep = rng.randrange(65, 20_000)
    return rng.choice(
        [
            b"[" * deep + b"]" * deep,
            b'{"a":' * deep + b"1" + b"}" * deep,
            b"[" * deep,
            b"9" * rng.randrange(4301, 20_000),
            b"[1, NaN]",
            b'{"a": Infinity}',
            b"\xff\xfe{}",
            bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))),
            b'["' + b"[" * deep + b'"]',  # brackets inside a string do not nest: valid
        ]
    )


def test_the_json_reader_parses_or_raises_input_error_only() -> None:
    rng = random.Random(13)
    problems = _problems()
    for _ in range(CASES // 4):
        value = random_json(rng)
        text = json.dumps(value)
        problems["wrong verdicts"] += loads(text, "corpus") != json.loads(text)
        data = hostile_json(rng)
        try:
            parsed = loads(data, "corpus")
        except InputError as exc:
            problems["tracebacks"] += "\n" in str(exc) or len(str(exc)) >= 400
        except Exception:  # noqa: BLE001 (counted: RecursionError, MemoryError, a bare ValueError)
            problems["tracebacks"] += 1
        else:
            problems["wrong verdicts"] += parsed != json.loads(data)  # only what the standard parser also accepts
    _tally("JSON documents", 2 * (CASES // 4), problems)


def test_mutated_draft_caches_load_or_raise_draft_error(tmp_path: Path) -> None:
    rng = random.Random(17)
    vocab = 50
    path = tmp_path / "cache.json"
    for _ in range(FILES):
        texts = [[rng.randrange(vocab) for _ in range(rng.randrange(0, 30))] for _ in range(rng.randrange(1, 8))]
        payload: dict[str, Any] = {"version": 1, "fingerprint": "", "depth": 24, "max_tokens": 65536, "texts": texts}
        path.write_text(json.dumps(payload))
        assert list(SuffixCache.load(path, vocab).texts) == [tuple(t) for t in texts if len(t) >= 2]
        bad = json.loads(json.dumps(payload))
        how = rng.choice(["id", "version", "texts", "bytes"])
        if how == "id" and any(bad["texts"]):
            text = next(t for t in bad["texts"] if t)
            text[rng.randrange(len(text))] = rng.choice([-1, vocab, 5.0, "5", None, True, 10**30])
        elif how == "version":
            bad["version"] = rng.choice([0, 2, "1", None, 1.0])
        else:
            bad["texts"] = rng.choice(["x", None, 7, [[1, 2], "t"], {"a": 1}])
        data = json.dumps(bad).encode()
        if how == "bytes":
            data = data[: rng.randrange(len(data))]
        path.write_bytes(data)
        with pytest.raises(DraftError):
            SuffixCache.load(path, vocab)
    _tally("JSON draft caches", 2 * FILES, _problems())  # each case asserted above: reached, none failed


def test_mutated_binary_draft_caches_load_or_raise_draft_error(tmp_path: Path) -> None:
    """The current (binary) format: a random byte edit, truncation or padding loads (then every
    kept id is in range and the kept tokens fit the bound) or raises DraftError; an id at or
    above the vocabulary, a size that does not match the header, or lengths that do not add up are
    always refused."""
    from verispec.reference.draft_cache_file import MAGIC

    rng = random.Random(29)
    vocab = 50
    path = tmp_path / "cache.bin"
    for _ in range(FILES):
        texts = [[rng.randrange(vocab) for _ in range(rng.randrange(2, 30))] for _ in range(rng.randrange(1, 8))]
        cache = SuffixCache(max_tokens=65536)
        for t in texts:
            cache.remember(t)
        cache.save(path)
        assert list(SuffixCache.load(path, vocab).texts) == [tuple(t) for t in texts]
        data = bytearray(path.read_bytes())
        body = data.index(b"\n", len(MAGIC)) + 1
        how = rng.choice(["id", "truncate", "pad", "lengths", "byte", "header"])
        must_refuse = how in ("id", "truncate", "pad", "lengths")
        if how == "id":
            at = len(data) - 4 * rng.randrange(1, sum(map(len, texts)) + 1)
            data[at : at + 4] = np.asarray([rng.choice([vocab, vocab + 1, 2**31, 2**32 - 1])], "<u4").tobytes()
        elif how == "truncate":
            data = data[: rng.randrange(body, len(data))]
        elif how == "pad":
            data += bytes(rng.randrange(1, 9))
        elif how == "lengths":
            at = body + 4 * rng.randrange(len(texts))
            old = int(np.frombuffer(bytes(data[at : at + 4]), "<u4")[0])
            data[at : at + 4] = np.asarray([old + rng.choice([1, 2, 1000])], "<u4").tobytes()
        elif how == "byte":
            data[rng.randrange(len(data))] = rng.randrange(256)
        else:
            data[rng.randrange(len(MAGIC), body)] = rng.randrange(256)
        path.write_bytes(bytes(data))
        try:
            loaded = SuffixCache.load(path, vocab)
        except DraftError as exc:
            assert "\n" not in str(exc) and len(str(exc)) < 400
            continue
        assert not must_refuse, how
        assert all(0 <= t < vocab for text in loaded.texts for t in text) and loaded.tokens <= 65536
    _tally("binary draft caches", 2 * FILES, _problems())  # each case asserted above


def test_mutated_calibrations_are_refused(tmp_path: Path) -> None:
    """Out-of-range values (re-sealed or not) and IN-range forgeries re-sealed without a key (a
    threshold moved to 0, -inf or a plausible nearby value, a count edited): all refused, the
    in-range ones because every threshold is recomputed from the scores the artifact carries."""
    from tests.support.calibration_records import artifact, edit

    rng = random.Random(19)
    path = artifact(tmp_path)
    original = path.read_text()
    bad_values: list[Any] = [-1.0, "-inf", "NaN", "x", None, True, [1], {"a": 1}, -(10**30)]
    for _ in range(FILES):
        path.write_text(original)
        kind = rng.choice([None, "chat", "code"])
        name = rng.choice(["margin_threshold", "supnorm_quantile", "halfrange_quantile", "agreement", "depth"])
        plausible = rng.random() < 0.5 and name != "depth"

        def change(raw: dict[str, Any]) -> None:
            depths = raw["depths"] if kind is None else raw["kinds"][kind]["depths"]
            entry = depths[rng.randrange(len(depths))]
            if plausible:  # a value calibration could produce: only recomputing from the scores refutes it
                entry[name] = rng.choice([0.0, entry[name] * rng.choice([0.5, 0.9, 0.99]), entry[name] / 2 + 1e-3])
                if name == "agreement":
                    entry[name] = min(1.0, entry[name])
            else:
                entry[name] = rng.choice(bad_values)

        edit(path, change, reseal=rng.random() < 0.8)
        with pytest.raises(CalibrationError):
            Calibration.load(path, "b" * 64)
    _tally("calibrations", FILES, _problems())  # each case asserted above


def test_mutated_calibration_records_are_refused_or_recomputed(tmp_path: Path) -> None:
    """Random byte edits of the stored scores, re-sealed: refused (not base64, not a score, a
    threshold that no longer follows), or loaded, and then every threshold is the one the edited
    scores give (the load recomputed it): never a threshold the scores do not support."""
    import base64

    from tests.support.calibration_records import artifact, edit
    from verispec.reference.calibration import build

    rng = random.Random(23)
    path = artifact(tmp_path)
    original = path.read_text()
    for _ in range(FILES // 3):  # a third: each load recomputes every threshold
        path.write_text(original)
        field_name = rng.choice(["supnorm", "halfrange", "margins", "flips", "prompt", "kind"])

        def change(raw: dict[str, Any]) -> None:
            entry = raw["records"][field_name]
            data = bytearray(base64.b64decode(entry["base64"]))
            for _ in range(rng.randrange(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            entry["base64"] = base64.b64encode(bytes(data)).decode()

        edit(path, change)
        try:
            cal = Calibration.load(path, "b" * 64)
        except CalibrationError as exc:
            assert "\n" not in str(exc)
            continue
        assert cal.records is not None
        again = build(
            cal.records,
            q=cal.q,
            model_sha256=cal.model_sha256,
            model_name=cal.model_name,
            n_layer=cal.n_layer,
            lens=cal.lens,
            n_lens=cal.n_lens,
            ridge=cal.ridge,
        )
        assert again.depths == cal.depths and again.kinds == cal.kinds
    _tally("calibration records", FILES // 3, _problems())  # each case asserted above


# -- output paths, extreme parameters, API types ----------------------------------------------------
# Each family counts its cases and its failures by kind (a wrong verdict, a traceback: an exception
# that is not the domain's typed error, a hang: a case over HANG_S, a leftover: a temporary file or
# a changed non-regular file), prints the tally (pytest -s shows it) and asserts all are zero.

HANG_S = 5.0  # a FIFO opened for writing with no reader would block forever: any case this slow hung


TOTAL: dict[str, int] = {"cases": 0, "wrong verdicts": 0, "tracebacks": 0, "hangs": 0, "leftovers": 0}


def _tally(family: str, cases: int, problems: dict[str, int]) -> None:
    """Print the family's line, add it to the run's total (printed at the module's end), assert none."""
    print(f"corpus {family}: {cases} cases, " + ", ".join(f"{n} {kind}" for kind, n in problems.items()))
    TOTAL["cases"] += cases
    for kind, n in problems.items():
        TOTAL[kind] += n
    assert not any(problems.values()), (family, problems)


@pytest.fixture(scope="module", autouse=True)
def corpus_summary(request: pytest.FixtureRequest) -> Any:
    """One line at the end of the module's run with every family's cases and problems added up
    (shown without -s: written through the terminal reporter)."""
    yield
    line = (
        f"corpus {'long' if LONG else 'fast'} total: {TOTAL['cases']} cases, "
        + ", ".join(f"{n} {kind}" for kind, n in TOTAL.items() if kind != "cases")
        + f" (families that ran: {len(request.session.items)} tests collected)"
    )
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        print(line)
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line("\n" + line)


def _problems() -> dict[str, int]:
    return {"wrong verdicts": 0, "tracebacks": 0, "hangs": 0, "leftovers": 0}


def _mode(path: Path) -> int | None:
    try:
        return os.lstat(path).st_mode
    except FileNotFoundError:
        return None


def _plant(rng: random.Random, folder: Path) -> tuple[Path, bool, str]:
    """A target of a random kind in ``folder``: (path, follow_symlinks, expected 'written' or 'refused')."""
    kind = rng.choice(
        [
            "absent",
            "regular",
            "fifo",
            "folder",
            "missing parent",
            "through a file",
            "link to regular",
            "link to absent",
            "link to fifo",
            "link to folder",
            "link loop",
        ]
    )
    follow = rng.random() < 0.5
    target = folder / "out.bin"
    if kind == "regular":
        target.write_bytes(b"old")
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "folder":
        target.mkdir()
    elif kind == "missing parent":
        target = folder / "missing" / "out.bin"
    elif kind == "through a file":
        (folder / "file").write_bytes(b"x")
        target = folder / "file" / "out.bin"
    elif kind.startswith("link"):
        pointed = folder / "pointed"
        if kind == "link to regular":
            pointed.write_bytes(b"old")
        elif kind == "link to fifo":
            os.mkfifo(pointed)
        elif kind == "link to folder":
            pointed.mkdir()
        elif kind == "link loop":
            pointed.symlink_to(target)
        target.symlink_to(pointed)
    written = kind in ("absent", "regular") or (follow and kind in ("link to regular", "link to absent"))
    return target, follow, "written" if written else "refused"


def test_non_regular_output_paths_are_refused_and_left_as_they_were(tmp_path: Path) -> None:
    """Random targets through the one writer (reference/atomic.py): absent or regular (or, when
    asked, a symlink to one) is written; anything else is an OutputError and stays as it was."""
    from verispec.reference.atomic import replace_file
    from verispec.reference.errors import OutputError

    rng = random.Random(20_261_203)
    problems = _problems()
    cases = FILES * 5
    for case in range(cases):
        folder = tmp_path / f"c{case}"
        folder.mkdir()
        target, follow, expected = _plant(rng, folder)
        before = {p.name: _mode(p) for p in folder.iterdir()}
        started = time.monotonic()
        try:
            with replace_file(target, follow_symlinks=follow) as fh:
                fh.write(b"new")
            outcome = "written"
        except OutputError as exc:
            outcome = "refused"
            problems["tracebacks"] += "\n" in str(exc)
        except Exception:  # noqa: BLE001 (counted: anything else is a traceback)
            outcome = "traceback"
            problems["tracebacks"] += 1
        problems["hangs"] += time.monotonic() - started > HANG_S
        problems["wrong verdicts"] += outcome != expected and outcome != "traceback"
        if outcome == "written":
            real = Path(os.path.realpath(target)) if follow else target
            problems["wrong verdicts"] += real.read_bytes() != b"new" or target.is_symlink() != (
                target.name in before and stat_is_link(before[target.name])
            )
        after = {p.name: _mode(p) for p in folder.iterdir()}
        left = [n for n in after if ".tmp-" in n]
        changed = outcome == "refused" and after != before
        problems["leftovers"] += bool(left) or changed
    for device in ("/dev/null", "/dev/zero", "/dev/full"):  # lstat only: the writer never opens one
        cases += 1
        try:
            from verispec.reference.atomic import output_file

            output_file(Path(device), follow_symlinks=True)
            problems["wrong verdicts"] += 1
        except OutputError:
            pass
    _tally("output paths", cases, problems)


def stat_is_link(mode: int | None) -> bool:
    import stat

    return mode is not None and stat.S_ISLNK(mode)


# values of the wrong type or out of any range, for any numeric keyword
EXTREME: tuple[Any, ...] = (
    float("inf"),
    float("-inf"),
    float("nan"),
    "1",
    "inf",
    b"1",
    True,
    False,
    [1],
    {"x": 1},
    object(),
    1e308 * 10,
)


def test_extreme_and_mistyped_api_arguments_are_check_errors() -> None:
    """verispec.check / check_decoder with a random keyword given a random wrong value: a CheckError
    naming the keyword, before anything runs (never a TypeError, an OverflowError or a run)."""
    import verispec
    from verispec.spec.check import CheckError

    check_keywords = [
        "scale",
        "timeout",
        "workers",
        "seed",
        "count",
        "budget_samples",
        "shard",
        "only",
        "law_only",
        "fail_fast",
        "sequential",
        "batch_verifier",
        "verifier_cmd",
        "vectors",
    ]
    decoder_keywords = [
        "depth",
        "m",
        "temperature",
        "top_k",
        "top_p",
        "min_p",
        "repeat_penalty",
        "tv",
        "fraction",
        "alpha",
        "min_mass",
        "k",
        "max_tokens",
        "draft_temperature",
        "draft_top_k",
        "greedy",
        "prompts",
        "penalty_last_n",
        "min_tokens",
        "law",
        "engine",
    ]
    rng = random.Random(20_261_204)
    problems = _problems()
    cases = CASES // 10
    for _ in range(cases):
        decoder = rng.random() < 0.5
        name = rng.choice(decoder_keywords if decoder else check_keywords)
        value = rng.choice(EXTREME)
        if name in ("only", "prompts") and isinstance(value, list):
            value = "contract"  # a lone string: a list of strings is valid
        if name == "vectors" and isinstance(value, (str, bytes)):
            value = 7
        if name in ("law", "verifier_cmd", "engine", "batch_verifier") and isinstance(value, str):
            value = 3  # a string is the right type there ("module:function", a command, a law name)
        if name in ("law_only", "fail_fast", "sequential", "greedy") and isinstance(value, bool):
            value = "yes"  # True and False are valid there
        started = time.monotonic()
        try:
            if decoder:
                verispec.check_decoder(ours=name != "engine", model="/nonexistent.gguf", **{name: value})
            else:
                verispec.check("verispec.reference.speculative:verify_sampled", **{"only": ["contract"], name: value})
            problems["wrong verdicts"] += 1  # accepted a value of the wrong type or range
        except CheckError as exc:
            problems["wrong verdicts"] += name not in str(exc)
            if name not in str(exc):
                print(f"wrong: {name}={value!r}: {exc}")
        except Exception as exc:  # noqa: BLE001 (counted)
            problems["tracebacks"] += 1
            print(f"traceback: {name}={value!r}: {type(exc).__name__}: {exc}")
        problems["hangs"] += time.monotonic() - started > HANG_S
    for text in ("inf", "-inf", "nan", "1e400", "", "fast", "0", "-1", "True"):  # the plugin's --verispec-scale
        cases += 1
        from verispec.pytest_plugin import scale_factor

        class Config:
            def getoption(self, name: str) -> None:
                return None

            def getini(self, name: str, text: str = text) -> str:
                return text

        try:
            scale_factor(Config())  # type: ignore[arg-type]
            problems["wrong verdicts"] += 1
        except pytest.UsageError:
            pass
        except Exception:  # noqa: BLE001 (counted)
            problems["tracebacks"] += 1
    _tally("API arguments", cases, problems)


# -- the depth mode's generations: ids of exactly their type, in every mode -------------------------


def _mistyped_id(rng: random.Random, t: int, vocab: int) -> Any:
    """A value that is not the id ``t``, though many would convert to it (or to another id)."""
    return rng.choice(
        [t + 0.5, float(t), t + 0.999, t - 0.001, str(t), True, False, None, np.float64(t), np.bool_(True)]
        + [np.float32(t), [t], {"id": t}, -1, vocab, vocab + 1, 2**63, 10**30, -(10**30), float("nan"), float("inf")]
    )


def _generation(rng: random.Random, vocab: int) -> Any:
    ids = [rng.randrange(vocab) for _ in range(rng.randrange(1, 12))]
    if rng.random() < 0.5:
        return ids
    return {"ids": ids, "cycles": [[2, rng.randrange(3)]], "logprobs": [-rng.random() for _ in ids]}


def test_depth_generations_are_read_with_every_field_of_its_type() -> None:
    """A block of generations as an engine answers it (this process), and as a worker sends it (its
    wire form through JSON, :func:`as_mapping`): valid blocks read back unchanged; one spoiled
    field anywhere (an id ``5.0``, ``"5"``, ``true``, ``t + 0.5``, out of range; a cycle or a
    logprob of the wrong type; a missing or extra generation) is an ExternalError, in both forms."""
    from verispec.spec.decoder.depth.blocks import as_mapping, checked_block

    rng = random.Random(20_261_205)
    problems = _problems()
    cases = 0
    for _ in range(CASES // 10):
        vocab, n = rng.randrange(2, 400), rng.randrange(1, 6)
        block = [_generation(rng, vocab) for _ in range(n)]
        bad: list[Any] = json.loads(json.dumps(block))
        i = rng.randrange(n)
        how = rng.choice(["id", "id", "id", "cycle", "logprob", "count"])
        if how == "count":
            bad = bad[:-1] if rng.random() < 0.5 else [*bad, bad[0]]
        elif how == "id" or not isinstance(bad[i], dict):
            ids = bad[i]["ids"] if isinstance(bad[i], dict) else bad[i]
            at = rng.randrange(len(ids))
            ids[at] = _mistyped_id(rng, ids[at], vocab)
        elif how == "cycle":
            bad[i]["cycles"][0][rng.randrange(2)] = rng.choice([1.0, "1", True, None, -1, 2**63, [1]])
        else:
            bad[i]["logprobs"][0] = rng.choice(["-0.5", True, None, [0.1], 10**400])
        for form in ("engine", "worker"):
            cases += 2
            try:
                wire = block if form == "engine" else json.loads(json.dumps([as_mapping(g) for g in block]))
                read = [g.ids for g in checked_block(wire, n, vocab)]
                problems["wrong verdicts"] += read != [tuple(g["ids"] if isinstance(g, dict) else g) for g in block]
            except Exception as exc:  # noqa: BLE001 (counted: a valid block refused, or a traceback)
                problems["wrong verdicts" if isinstance(exc, ExternalError) else "tracebacks"] += 1
            try:
                spoiled = bad if form == "engine" else json.loads(json.dumps([as_mapping(g) for g in bad]))
                checked_block(spoiled, n, vocab)
                problems["wrong verdicts"] += 1
                print(f"accepted: {bad!r}")
            except ExternalError as exc:
                problems["tracebacks"] += "\n" in str(exc) or len(str(exc)) >= 600
            except ValueError:  # json.dumps refuses 10**400-like values in no case; NaN passes as NaN
                problems["tracebacks"] += 1
            except Exception as exc:  # noqa: BLE001 (counted)
                problems["tracebacks"] += 1
                print(f"traceback: {bad!r}: {type(exc).__name__}: {exc}")
    _tally("depth generations", cases, problems)


# -- request independence: repeated generations --------------------------------------------------------


def _repeat_run(
    rng: random.Random, engine: str, block: int, blocks: int, alpha: float, vocab: int, sharpness: int
) -> tuple[int, int, float]:
    """(the generation at which the repeat test first rejects (0: never), the first repeat (0:
    none), the largest probability of one generation) of ``engine`` on a law of 8 tokens drawn
    i.i.d. from a random row over ``vocab`` ids (``sharpness``: the power its weights are raised
    to), fed to :class:`RepeatSums` as the depth test feeds it (spec/decoder/depth/law.py ``Sums.add``)."""
    from verispec.spec.decoder.depth.law import RepeatSums

    row = np.asarray([rng.random() ** sharpness for _ in range(vocab)])
    row /= row.sum()
    streams = [np.random.SeedSequence(rng.randrange(2**32)) for _ in range(4)]
    fixed = rng.randrange(2**32)

    def draw(source: np.random.Generator) -> tuple[int, ...]:
        return tuple(int(t) for t in source.choice(vocab, size=8, p=row))

    sums, seen, generation, previous, first_repeat = RepeatSums(), set(), 0, [], 0  # type: ignore[var-annotated]
    for b in range(blocks):
        if engine == "independent":
            source = np.random.default_rng(rng.randrange(2**32))
            gens = [draw(source) for _ in range(block)]
        elif engine == "seed ignored":
            source = np.random.default_rng(fixed)
            gens = [draw(source) for _ in range(block)]
        elif engine == "stale blocks":
            source = np.random.default_rng(rng.randrange(2**32))
            gens = previous if b % 2 == 1 else [draw(source) for _ in range(block)]
        else:  # four streams: generation i of every block from a fresh stream i % 4
            gens = [draw(np.random.default_rng(streams[i % 4])) for i in range(block)]
        previous = gens
        for ids in gens:
            generation += 1
            repeated = ids in seen
            first_repeat = first_repeat or (generation if repeated else 0)
            sums.add(repeated, generation)
            if sums.rejects(alpha):
                return generation, first_repeat, float(row.max()) ** 8
            if not repeated:
                seen.add(ids)
                sums.seen_mass += float(np.prod(row[list(ids)]))
    return 0, first_repeat, float(row.max()) ** 8


def test_reused_streams_fail_at_the_block_of_their_first_repeat_and_independent_ones_never() -> None:
    """Random laws (flat to sharp), engines with independent draws, four random streams, stale blocks
    or an ignored seed: an independent engine is never rejected (its repeats are the law's own, even
    where the law is so sharp that most generations repeat; P <= alpha by Ville, alpha 1e-6 here);
    a reusing engine on a law that makes repeats unlikely (a birthday bound: the likeliest
    generation's probability times the generations drawn, squared, under 1e-6) is rejected by the
    end of the block that holds its first repeat."""
    rng = random.Random(20_261_206)
    problems = _problems()
    cases = CASES // 20
    alpha, judged = 1e-6, 0
    for _ in range(cases):
        engine = rng.choice(["independent", "independent", "four streams", "stale blocks", "seed ignored"])
        block, blocks = rng.randrange(5, 30), rng.randrange(2, 6)
        sharp = rng.random() < 0.3  # a near-deterministic law: repeats are its own
        vocab, sharpness = (rng.choice([2, 3]), 8) if sharp else (rng.choice([20, 60, 200]), rng.choice([1, 2]))
        rejected, first, likeliest = _repeat_run(rng, engine, block, blocks, alpha, vocab, sharpness)
        if engine == "independent":
            problems["wrong verdicts"] += rejected != 0
            continue
        if first and likeliest * (block * blocks) ** 2 < 1e-6:
            judged += 1
            deadline = -(-first // block) * block  # the end of the block holding the first repeat
            problems["wrong verdicts"] += not 0 < rejected <= deadline
            if not 0 < rejected <= deadline:
                print(f"late: {engine} block={block} first repeat {first}, rejected at {rejected}")
    _tally(f"repeated generations ({judged} reusing engines judged at their first repeat)", cases, problems)


# -- extreme and mistyped flags of check-decoder, through the command ------------------------------------

BAD_DECODER_FLAGS: tuple[tuple[str, str], ...] = (
    ("--temperature", "nan"),
    ("--temperature", "-1"),
    ("--temperature", "inf"),
    ("--top-k", "-1"),
    ("--top-k", "1.5"),
    ("--top-p", "2"),
    ("--top-p", "nan"),
    ("--min-p", "-0.1"),
    ("--tv", "0"),
    ("--tv", "2"),
    ("--tv", "nan"),
    ("--depth", "-1"),
    ("--depth", "1000000000"),
    ("--workers", "0"),
    ("--workers", "100000"),
    ("--alpha", "1.5"),
    ("--alpha", "nan"),
    ("--budget", "-1"),
    ("--budget", "nan"),
    ("--fraction", "0"),
    ("--min-mass", "nan"),
    ("--m", "9"),
    ("--timeout", "nan"),
    ("--repeat-penalty", "inf"),
    ("--min-tokens", "-1"),
    ("--k", "0"),
    ("--draft-temperature", "nan"),
    ("--draft-top-k", "-1"),
    ("--progress-every", "nan"),
    ("--weights", "int4"),
    ("--law", "sglang"),
)


def test_extreme_decoder_flags_are_usage_errors_before_any_run(tmp_path: Path) -> None:
    """Each bad flag value (or two at once) through ``verispec check-decoder``: exit 2 with one line
    naming it, nothing on stdout, within HANG_S, no process left (never a run that fails the decoder,
    never one without end, never 100,000 worker processes)."""
    import contextlib
    import io

    from tests.support.synthetic import Variant, write_synthetic
    from verispec import cli

    model = tmp_path / "tiny.gguf"
    write_synthetic(
        model,
        Variant("tiny", "llama", "tiny llama", n_embd=32, n_layer=1, n_head=4, n_head_kv=2, n_ff=48),
        quant_types=("F16",),
    )
    base = ["check-decoder", "--model", str(model), "--prompt", "the model", "--ours", "--depth", "8", "--budget", "5"]
    rng = random.Random(20_261_207)
    problems = _problems()
    cases = len(BAD_DECODER_FLAGS) * (4 if LONG else 1)
    children_before = _children()
    for case in range(cases):
        flags = list(BAD_DECODER_FLAGS[case % len(BAD_DECODER_FLAGS)])
        if case >= len(BAD_DECODER_FLAGS):  # and a second bad flag of another name
            other = rng.choice([f for f in BAD_DECODER_FLAGS if f[0] != flags[0]])
            flags += list(other)
        out, err = io.StringIO(), io.StringIO()
        started = time.monotonic()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                status = cli.main([*base, *flags])
        except SystemExit as exc:  # argparse's own refusal of a malformed value
            status = exc.code if isinstance(exc.code, int) else 2
        except Exception as exc:  # noqa: BLE001 (counted)
            status = -1
            problems["tracebacks"] += 1
            print(f"traceback: {flags}: {type(exc).__name__}: {exc}")
        problems["hangs"] += time.monotonic() - started > 4 * HANG_S
        lines = [line for line in err.getvalue().splitlines() if "error" in line]
        wrong = status != 2 or out.getvalue() != "" or len(lines) != 1 or "Traceback" in err.getvalue()
        problems["wrong verdicts"] += wrong and status != -1
        if wrong:
            print(f"wrong: {flags}: exit {status}: {err.getvalue()[-300:]!r}")
    problems["leftovers"] += len(_children() - children_before)
    _tally("check-decoder flags", cases, problems)


def _children() -> set[int]:
    """This process's live child processes (a worker or an engine left behind is a leftover)."""
    me, children = str(os.getpid()), set()
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):  # not a process, or one that just ended
            continue
        if fields[1] == me and fields[0] != "Z":  # its parent is this process, and it is not a zombie
            children.add(int(entry.name))
    return children


# -- peers --------------------------------------------------------------------------------------

PEERS: dict[str, str] = {
    "closes stdout, keeps running": "exec >&-; sleep 60",
    "forks a child and exits": "(sleep 60 </dev/null >/dev/null 2>&1 &); exit 3",
    "never answers": "cat >/dev/null",
    "never reads stdin": "sleep 60",
    "answers garbage": "while read line; do echo 'not json'; done",
    "answers deep JSON": "read line; python3 -c \"print('['*100000 + ']'*100000)\"; sleep 60",
    "answers a huge integer id": "read line; python3 -c \"print('{\\\"id\\\": ' + '7'*6000 + ', \\\"output\\\": {}}')\"; sleep 60",
    "answers out of order": 'while read line; do echo \'{"id": "other", "output": {}}\'; done',
    "answers negative tokens": (
        'while read line; do echo \'{"id": \'$(echo "$line" | python3 -c \'import json,sys; print(json.dumps(json.load(sys.stdin)["id"]))\')'
        '\', "output": {"accepted": 0, "token": -3, "kind": "repair"}}\'; done'
    ),
}
PEER_TIMEOUT = 1.0


def sampled_call(wire: WireImplementation) -> Callable[[], object]:
    p = np.full((2, 4), 0.25)
    q = np.full((1, 4), 0.25)
    return lambda: wire.verify(p, q, [1], [0.5, 0.5])


def batch_call(wire: WireImplementation) -> Callable[[], object]:
    p = np.full((2, 4), 0.25)
    q = np.full((1, 4), 0.25)
    return lambda: wire.verify_batch(p, q, np.ones((3, 1), dtype=np.int64), np.full((3, 2), 0.5))


@pytest.mark.parametrize(
    "peer", sorted(PEERS) if LONG else ["closes stdout, keeps running", "answers negative tokens", "never reads stdin"]
)
@pytest.mark.parametrize("call", [sampled_call, batch_call] if LONG else [sampled_call])
def test_a_misbehaving_peer_fails_within_its_bound_and_leaves_nothing(
    peer: str, call: Callable[[WireImplementation], Callable[[], object]]
) -> None:
    wire = WireImplementation(CommandTransport(PEERS[peer], timeout=PEER_TIMEOUT))
    pgids = []
    began = time.monotonic()
    for _ in range(3):  # a dead peer fails every later call too, at once
        with pytest.raises(ExternalError):
            call(wire)()
        proc = wire.transport._proc
        if proc is not None:
            pgids.append(proc.pid)
    wire.close()
    problems = _problems()
    problems["hangs"] += time.monotonic() - began >= 3 * (PEER_TIMEOUT + 10)  # each call ends within its bound
    problems["leftovers"] += sum(not group_gone(pgid) for pgid in pgids)
    _tally(f"peer {peer!r}", 3, problems)


# -- whole runs (long mode: each is a full `verispec check --law-only`) ---------------------------

LATE_BREAKER = """
import json, sys
from verispec.spec.external import law_handler, reference_handler
law = law_handler(reference_handler, 1)
for line in sys.stdin:
    request = json.loads(line)
    if request["op"] != "sampled_law":
        print(json.dumps({"id": request["id"], "unsupported": request["op"]}), flush=True)
        continue
    try:
        output = law("sampled_law", request["input"])
    except Exception as exc:
        print(json.dumps({"id": request["id"], "error": str(exc)}), flush=True)
        continue
    if len(output["token"]) > 1:
        output["token"][-1] = -3  # one bad item, the last: only a check of every item sees it
    print(json.dumps({"id": request["id"], "output": output}), flush=True)
"""


@pytest.mark.skipif(not LONG, reason="long corpus only (VERISPEC_CORPUS_LONG=1): full check runs")
@pytest.mark.parametrize("mode", [[], ["--sequential"], ["--budget", "600"], ["--shard", "1/2"], ["--workers", "2"]])
def test_a_late_bad_item_fails_every_kind_of_run_with_a_complete_report(tmp_path: Path, mode: list[str]) -> None:
    import subprocess
    import sys

    peer = tmp_path / "peer.py"
    peer.write_text(LATE_BREAKER)
    repo = Path(__file__).resolve().parent.parent
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "verispec",
            "check",
            "--verifier-cmd",
            f"{sys.executable} {peer}",
            "--law-only",
            "--timeout",
            "60",
            "--json",
            *mode,
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 1, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["failed"] and "Traceback" not in result.stderr
    assert any("token -3" in p["detail"] for p in report["properties"] if p["status"] == "failed")
