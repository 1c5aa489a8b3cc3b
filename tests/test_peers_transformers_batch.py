"""transformers' continuous batching through the batch op (verispec/peers/transformers_peer.py
``ContinuousBatchingPeer``; spec/decoder/depth/batch.py): a small batch run passes, each request
sampled with its own temperature, top-k and top-p and requests joining mid-decode; the same
adapter with one request's params applied to all (a batch mutant) is rejected; what continuous
batching cannot take per request is refused with a typed error, never sampled wrongly."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.peer_verdicts import PROMPT, write_models
from verispec.decoder.api import check_decoder
from verispec.reference.errors import CheckError

pytestmark = [pytest.mark.oracle, pytest.mark.usefixtures("blas_single_thread")]

SMALL = dict(law="transformers", temperature=0.8, top_k=20, depth=8, tv=0.5, fraction=1.0, batch=True)


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    torch.set_num_threads(1)
    return write_models(tmp_path_factory.mktemp("cb"))["target"]


def test_continuous_batching_passes_a_small_batch_run(target: Path) -> None:
    from verispec.peers.transformers_peer import continuous_batching

    report = check_decoder(continuous_batching, model=target, prompts=[PROMPT], **SMALL)  # type: ignore[arg-type]
    assert report.passed, report.summary()
    numbers = report.results[0].numbers
    assert numbers["joined_mid_decode"] > 0 and len(numbers["lanes"]) == 3  # no greedy lane: do_sample is global


def test_one_request_params_for_all_is_rejected_on_continuous_batching(target: Path) -> None:
    from verispec.peers.transformers_peer import continuous_batching
    from verispec.spec.decoder.depth.batch_mutants import batch_mutant

    report = check_decoder(
        lambda path: batch_mutant("one_params_for_all", continuous_batching(path)),
        model=target,
        prompts=[PROMPT],
        **SMALL,  # type: ignore[arg-type]
    )
    assert not report.passed and "temperature x 0.6" in report.results[0].detail, report.summary()


def test_what_continuous_batching_cannot_take_per_request_is_refused() -> None:
    from verispec.peers.transformers_peer import cb_request_kwargs
    from verispec.reference.sampling import SamplingParams
    from verispec.spec.decoder.depth.batch import BatchRequest
    from verispec.spec.decoder.laws import build

    for flags in ({"min_p": 0.1}, {"repetition_penalty": 1.3}, {"min_tokens": 2}):
        law = build("transformers", {"temperature": 0.8, **flags}, (2,))
        with pytest.raises(CheckError):
            cb_request_kwargs(BatchRequest((1,), law.legacy, 4, 1, 0, law))
    with pytest.raises(CheckError, match="transformers' law"):
        cb_request_kwargs(BatchRequest((1,), SamplingParams(), 4, 1))


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


def test_the_batch_call_hides_only_older_objects_from_the_collector_and_only_its_own_freeze() -> None:
    """The manager's gc.collect() on stop skips the heap that existed before the call (a full
    collection per stop cost more CPU than the batch's decoding), still collects the cycles made
    inside the call, hands the older objects back on exit, and leaves someone else's freeze as it was."""
    import gc
    import weakref

    from verispec.peers.transformers_peer import older_objects_left_out_of_gc

    assert gc.get_freeze_count() == 0
    node = _Node()
    older = weakref.ref(node)
    with older_objects_left_out_of_gc():
        del node  # garbage from before the call: frozen, so left for later
        assert gc.get_freeze_count() > 0
        inner = weakref.ref(_Node())
        gc.collect()
        assert inner() is None and older() is not None
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert older() is None  # back in the collector's view
    # Another owner's freeze: a garbage cycle it froze must stay out of the collector's view after
    # the call. (The frozen count itself is no witness: a frozen object whose references drop to
    # zero, say one of a worker thread's, still leaves the permanent generation.)
    theirs = _Node()
    their_ref = weakref.ref(theirs)
    gc.freeze()
    try:
        del theirs
        with older_objects_left_out_of_gc():
            pass
        assert gc.get_freeze_count() > 0
        gc.collect()
        assert their_ref() is not None  # another owner's freeze is not undone
    finally:
        gc.unfreeze()
    gc.collect()
    assert their_ref() is None
