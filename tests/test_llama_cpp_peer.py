"""The llama-cpp-python adapter's pieces that need no llama-cpp-python (verispec/peers/llama_cpp_peer.py).

``PenaltyProcessor`` is llama.cpp's penalty stage written as a user ``logits_processor``: the gate's
``lookup-processor`` path (tests/support/peer_verdicts_llama.py) judges it under ``--law llama.cpp``
with the penalties on, so on the right history it must be that law's penalty stage exactly.
"""

from __future__ import annotations

import numpy as np

from verispec.peers.llama_cpp_peer import PenaltyProcessor
from verispec.spec.decoder.laws.llamacpp import Params, law

# float32 logits through one division or multiplication and one subtraction: each processed logit
# is within 2 float32 ulps (2 * 2**-23 relative, |logit| <= 8 here) of the law's float64 stage, so
# a probability moves by at most exp(2 * 8 * 2**-23 * 2) - 1 < 4e-6 relative; 1e-5 absolute covers it
PROBABILITY_TOLERANCE = 1e-5


def test_the_penalty_processor_on_prompt_plus_output_is_the_law_s_penalty_stage() -> None:
    rng = np.random.default_rng(0)
    vocab, window = 40, 6
    on = Params(
        temp=0.8,
        top_k=0,
        top_p=1.0,
        min_p=0.0,
        penalty_last_n=window,
        repeat_penalty=1.3,
        frequency_penalty=0.2,
        presence_penalty=0.1,
    )
    off = Params(temp=0.8, top_k=0, top_p=1.0, min_p=0.0, penalty_last_n=window)
    processor = PenaltyProcessor(1.3, 0.2, 0.1, window)
    for _ in range(20):
        prompt = [int(t) for t in rng.integers(0, vocab, 5)]
        output = [int(t) for t in rng.integers(0, 8, rng.integers(0, 12))]  # repeats, past the window
        logits = rng.normal(0.0, 3.0, vocab).astype(np.float32)
        processor.prompt_length = len(prompt)
        processed = processor(np.array(prompt + output, dtype=np.intc), logits.copy())
        expected = np.asarray(law(logits, prompt, output, on))
        got = np.asarray(law(processed, prompt, output, off))
        assert np.max(np.abs(got - expected)) < PROBABILITY_TOLERANCE


def test_the_penalty_processor_counts_what_it_is_handed_beyond_the_output() -> None:
    """Handed drafts past the sampled row (llama-cpp-python's prompt lookup, released), it penalizes
    them: the mechanism the gate's lookup-processor path detects."""
    processor = PenaltyProcessor(2.0, 0.0, 0.0, 64)
    processor.prompt_length = 2
    logits = np.full(6, 1.0, dtype=np.float32)
    right = processor(np.array([0, 1, 3], dtype=np.intc), logits.copy())
    with_drafts = processor(np.array([0, 1, 3, 4, 5], dtype=np.intc), logits.copy())
    assert right.tolist() == [1.0, 1.0, 1.0, 0.5, 1.0, 1.0]
    assert with_drafts.tolist() == [1.0, 1.0, 1.0, 0.5, 0.5, 0.5]
