"""Draft sources in isolation: prompt lookup, spec parsing, option checks, vocabulary equality,
adaptive k, the predicted-speedup formula."""

from __future__ import annotations

from pathlib import Path

import pytest

from verispec.reference.drafts import (
    NGRAM_MIN,
    AdaptiveK,
    DraftSpec,
    NgramDraft,
    check_exit_layer,
    check_options,
    check_same_vocab,
    lookup,
    parse_draft_spec,
    predicted_speedup,
)
from verispec.reference.errors import DraftError
from verispec.reference.tokenizer import Tokenizer


def test_lookup_longest_most_recent() -> None:
    assert lookup([1, 2, 3, 9, 1, 2, 3, 7, 1, 2, 3], 2) == [7, 1]  # the most recent 3-gram match
    assert lookup([5, 1, 2, 8, 6, 2], 3) == [8, 6, 2]  # only the 1-gram "2" recurs
    assert lookup([1, 2, 3, 4], 4) == []  # nothing recurs
    assert lookup([7], 4) == []
    assert lookup([4, 4, 4, 4], 3) == [4]  # continuation runs to the end of the history
    assert lookup([1, 2, 1, 3, 9, 1, 2], 2) == [1, 3]  # 2-gram (1, 2) beats the more recent 1-gram
    assert lookup([1, 2, 3, 1, 2, 3], 10, n_max=1) == [1, 2, 3]
    assert lookup([5, 1, 2, 8, 6, 2], 3, n_min=2) == []  # only a 1-gram recurs
    assert lookup([1, 2, 1, 3, 9, 1, 2], 2, n_min=2) == [1, 3]


def test_ngram_draft_ignores_lone_token_recurrences() -> None:
    """The ngram source acts on suffix n-grams of length >= NGRAM_MIN (2) only."""
    assert NGRAM_MIN == 2
    draft = NgramDraft()
    assert draft.propose([5, 1, 2, 8, 6, 2], 3).tokens == ()
    assert draft.propose([5, 1, 2, 8, 6, 1, 2], 3).tokens == (8, 6, 1)


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("ngram", DraftSpec("ngram")),
        ("self", DraftSpec("self")),
        ("layerskip:12", DraftSpec("layerskip", layer=12)),
        ("model:/x/y.gguf", DraftSpec("model", path="/x/y.gguf")),
        ("model:a:b", DraftSpec("model", path="a:b")),
    ],
)
def test_parse(text: str, spec: DraftSpec) -> None:
    assert parse_draft_spec(text) == spec
    assert str(spec) == text


@pytest.mark.parametrize(
    "text", ["", "ngrams", "layerskip", "layerskip:", "layerskip:x", "model:", "model", "self:1", "eagle"]
)
def test_parse_rejects(text: str) -> None:
    with pytest.raises(DraftError) as info:
        parse_draft_spec(text)
    assert "\n" not in str(info.value) and repr(text) in str(info.value)


def test_options() -> None:
    check_options(1, 0.0)
    check_options(16, 1.0)
    for k, p in ((0, 0.5), (-1, 0.5), (2, -0.1), (2, 1.01), (2, float("nan"))):
        with pytest.raises(DraftError):
            check_options(k, p)
    for layer in (1, 29):
        check_exit_layer(layer, 30)
    for layer in (0, 30, -3):
        with pytest.raises(DraftError, match=f"{layer} is outside 1..29"):
            check_exit_layer(layer, 30)


def test_predicted_speedup() -> None:
    assert predicted_speedup(0.0, 4, 0.0) == pytest.approx(1.0)
    assert predicted_speedup(1.0, 4, 0.0) == pytest.approx(5.0)
    assert predicted_speedup(0.5, 1, 0.0) == pytest.approx(1.5)
    assert predicted_speedup(0.5, 2, 0.5) == pytest.approx(1.75 / 2.0)
    assert predicted_speedup(0.8, 0, 0.3) == 1.0


def test_adaptive_grows_on_full_acceptance_and_shrinks() -> None:
    a = AdaptiveK(8)
    assert a.next_k() == 2
    a.plain_step(1.0)
    a.update(2, 2, 0.01, 1.0)
    assert a.next_k() == 4
    a.update(4, 4, 0.01, 1.0)
    assert a.next_k() == 6
    a.update(6, 6, 0.01, 1.0)
    a.update(8, 8, 0.01, 1.0)
    assert a.next_k() == 8  # capped at k_max
    a.update(8, 3, 0.01, 1.0)
    assert a.next_k() == 7


def test_adaptive_stops_drafting_when_it_loses_and_probes() -> None:
    a = AdaptiveK(4)
    a.plain_step(0.1)  # a plain token costs 0.1 s
    for _ in range(AdaptiveK.MIN_CYCLES):
        k = a.next_k()
        assert k >= 1
        a.update(k, 0, 0.05 * k, 0.12)  # nothing accepted: 1 token per >= 0.17 s
    plain = 0
    while a.next_k() == 0:
        plain += 1
    assert plain == AdaptiveK.PROBE_START  # then a probe with k = 1
    a.update(1, 0, 0.05, 0.12)
    assert [a.next_k() for _ in range(2 * AdaptiveK.PROBE_START)] == [0] * (2 * AdaptiveK.PROBE_START)


def test_adaptive_keeps_drafting_when_it_pays() -> None:
    a = AdaptiveK(4)
    a.plain_step(0.1)
    for _ in range(10):
        k = a.next_k()
        a.update(k, k, 0.001 * k, 0.12)
        assert k >= 1


@pytest.mark.model
def test_vocab_equality(smollm2_path: Path, gemma3_path: Path) -> None:
    smollm2 = Tokenizer.from_file(smollm2_path)
    check_same_vocab(smollm2, Tokenizer.from_file(smollm2_path), "same")
    with pytest.raises(DraftError, match="262144 tokens, the target 49152"):
        check_same_vocab(smollm2, Tokenizer.from_file(gemma3_path), "gemma3")
