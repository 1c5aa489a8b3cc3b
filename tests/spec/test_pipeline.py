"""spec/pipeline.py: the rows request is immutable, its wire form round-trips exactly, and the
reference pipeline answers it with the reference's rows."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from verispec.reference.sampling import SamplingParams
from verispec.reference.speculative import speculative_rows
from verispec.spec.pipeline import ReferencePipeline, RowsRequest
from verispec.spec.vectors.wire import rows_request_from_json, rows_request_to_json


def _request() -> RowsRequest:
    rng = np.random.default_rng(3)
    return RowsRequest(
        target_logits=rng.normal(size=(3, 5)),
        draft_logits=rng.normal(size=(2, 5)),
        history=(4, 1),
        drafts=(2, 0),
        target_params=SamplingParams(temperature=0.7, top_k=3, logit_bias={1: -math.inf}),
        draft_params=SamplingParams(temperature=1.3, repeat_penalty=1.2),
    )


def test_request_is_immutable_and_owns_its_arrays() -> None:
    logits = np.zeros((2, 3))
    request = RowsRequest(logits, logits[:1], (), (0,), SamplingParams(), SamplingParams())
    logits[0, 0] = 7.0  # the caller's array changes; the request's copy does not
    assert request.target_logits[0, 0] == 0.0
    with pytest.raises(ValueError):
        request.target_logits[0, 0] = 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.drafts = (1,)  # type: ignore[misc]


def test_wire_form_round_trips_exactly() -> None:
    request = _request()
    wire = json.loads(json.dumps(rows_request_to_json(request), allow_nan=False))
    back = rows_request_from_json(wire)
    assert np.array_equal(back.target_logits, request.target_logits)  # float repr round-trips float64
    assert np.array_equal(back.draft_logits, request.draft_logits)
    assert (back.history, back.drafts) == (request.history, request.drafts)
    assert (back.target_params, back.draft_params) == (request.target_params, request.draft_params)
    assert list(wire) == ["target_logits", "draft_logits", "history", "drafts", "target_params", "draft_params"]


def test_non_finite_logits_go_on_the_wire_as_strings() -> None:
    request = dataclasses.replace(_request(), target_logits=np.array([[np.nan, np.inf, -np.inf, 0.5]]))
    assert rows_request_to_json(request)["target_logits"] == [["NaN", "Infinity", "-Infinity", 0.5]]


def test_reference_pipeline_is_speculative_rows() -> None:
    r = _request()
    p, q = ReferencePipeline().rows(r)
    p_want, q_want = speculative_rows(
        r.target_logits, r.draft_logits, r.history, r.drafts, r.target_params, r.draft_params
    )
    assert np.array_equal(p, p_want) and np.array_equal(q, q_want)
