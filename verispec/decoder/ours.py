"""``check-decoder --ours --weights MODE``: the fast engine's own speculative decoder under the depth test.

The decoder is what ``verispec generate --draft`` runs: :func:`reference.decode.speculative_generate`
(the one speculative loop) on the fast engine's model (engine/, ``--weights`` int8, f32 or auto,
as :func:`verispec.engine_load.load_engine` resolves it) with the engine's own law
(:func:`verispec.engine.generate.law_for`) and one of two drafts (``--draft-kind``):

- ``auto`` (the default, because it is the draft ``generate --draft`` runs by default: the gate
  judges the decoder the product ships): :class:`reference.draft_choice.AutoDraft`, suffix and
  prompt-lookup proposals merged into a one-hot token tree, scored in one tree-masked pass and
  verified by the tree protocol (reference/tree_decode.py). Its cost curve is FIXED
  (:data:`AUTO_COST`, ``online=False``): with the product's online timings the tree built each
  cycle depends on the machine's speed, so the same seed would give the same law but not the same
  tokens, and a block would differ between worker processes. With a fixed curve every choice is a
  function of the history alone. The curve only decides which tree is verified, never how (it
  is independent of the target's draws), so the verification judged is the product's; the tree
  shapes it meets are those the fixed curve picks, not those a given machine's timings would.
- ``ngram``: :class:`reference.drafts.NgramDraft` (q one-hot: a chain copied from the context,
  verified by speculative sampling), ``generate --draft ngram``.

Each generation is seeded from (the block's seed, its index) and gets a fresh draft, so a block is
the same wherever it is decoded.

The target law at every emitted position comes from the SAME engine's plain rows: ONE k-row
teacher-forced pass over prompt + generation (:meth:`EngineDecoder.forced_rows`). In the int8 mode
these are, bit for bit, the rows its decoding sees: the mode's contract is that a k-row pass gives
each row what k 1-row passes give (tests/test_engine_fused.py on both real models;
tests/test_engine_decoder.py checks it on the rows of a generation). So the stated law is
``--target-law engine-logits``'s: the engine's own logits through the target law's processors,
the law its own plain decoding samples. In the f32 mode the one-pass rows equal the decoding's
only up to float32 rounding (max |d logit| 8.6e-5 measured on a 24-token SmolLM2 generation), as
our reference loop's rows equal its one-pass rows: the law of an engine of our numerics with its
batch-shape noise, a deviation some 1e-4 in logits, far below the design's.

Batched decoding. In the fused int8 mode (``FastModel.batches_spans``) a ``generate`` call runs up
to ``batch`` of its generations in lockstep (:mod:`engine.lockstep`): each generation is the same
:func:`reference.decode.speculative_generate` call as alone, and each cycle's plain target passes
of all live generations are ONE ``FastModel.forward_many`` pass, which gives every span bit for bit
what its own ``forward`` gives it; a tree-masked pass (``auto``) runs alone, in turn
(:mod:`engine.lockstep`). So the tokens and cycles are those of decoding the generations one after
another (tests/test_engine_lockstep.py), whatever ``batch``. Other modes decode one generation at
a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from verispec.decoder.options import DRAFT_KINDS
from verispec.reference.draft_choice import NODES
from verispec.reference.errors import VerispecError
from verispec.reference.sampling import SamplingParams

BATCH = 64  # at most this many generations in lockstep: a depth block has at most 50 (spec/decoder/depth/law.py)
# requests of a batch call decoded at once (generate_batch): fewer than a batch test's call, so
# requests join mid-decode as others end, the serving stacks' continuous batching
BATCH_SLOTS = 8

# the auto draft's fixed cost curve (module docstring): rows -> cost relative to one row, for every
# size a tree of at most NODES nodes under one pending row can take. Near the int8 engine's measured
# curves (c(5) = 1.2-1.5 on both real models, lab/measurements/spec_bench_fresh_int8_*.json), so the
# gate meets the trees the product builds; the draft's own untimed prior (PRIOR_ROW_COST, 0.3 a row)
# prunes them to almost nothing at the default law.
GATE_ROW_COST = 0.1
AUTO_COST: dict[int, float] = {rows: 1.0 + GATE_ROW_COST * (rows - 1) for rows in range(1, NODES + 2)}


class EngineDecoder:
    """The engine's speculative decoder (module docstring): ``generate`` and ``forced_rows``."""

    def __init__(
        self,
        path: Path,
        weights: str = "auto",
        k: int = 2,
        batch: int = BATCH,
        batch_slots: int = BATCH_SLOTS,
        draft: str = "auto",
    ) -> None:
        from verispec.engine.generate import draw_for, law_for
        from verispec.engine_load import load_engine

        if draft not in DRAFT_KINDS:
            raise VerispecError(f"the engine decoder's draft is auto or ngram, not {draft!r}")
        self.draft_kind = draft
        self.auto_cost = AUTO_COST  # the auto draft's fixed cost curve (module docstring)
        loaded = load_engine(str(path), weights=weights)
        self.model, self.tokenizer, self.k = loaded.model, loaded.tokenizer, k
        self.batch = batch  # generations decoded in lockstep (module docstring); 1: one at a time
        self.law, self.draw = law_for(loaded.model), draw_for(loaded.model)
        self.weights = str(getattr(loaded.model, "weights_mode", weights))
        self.batch_slots = batch_slots  # generate_batch: requests decoded at once, the rest join mid-decode
        self.unseeded = np.random.default_rng(0x5EED)  # the seeds of unseeded requests: reproducible per engine

    def new_draft(self) -> Any:
        """A fresh draft for one generation (module docstring): ``auto`` with the fixed cost curve, or n-gram."""
        from verispec.reference.draft_choice import AutoDraft
        from verispec.reference.drafts import NgramDraft

        return AutoDraft(cost=self.auto_cost, online=False) if self.draft_kind == "auto" else NgramDraft()

    def generate_batch(self, requests: Sequence[Any]) -> list[dict[str, Any]]:
        """One whole generation per request (spec/decoder/depth/batch.py ``BatchRequest``: its own
        prompt, params, law, max_tokens and seed), speculation on, with its cycles; in lockstep,
        at most ``batch_slots`` at once (module docstring)."""
        from verispec.engine.lockstep import run_lockstep
        from verispec.reference.decode import SpeculativeOptions, SpeculativeResult, speculative_generate
        from verispec.reference.session import GenerationRequest

        for request in requests:
            if request.min_tokens:
                raise VerispecError("the engine's decode loop has no min_tokens")
            if request.law is not None and request.law.name != "verispec":
                raise VerispecError(f"the engine samples the verispec law only, not {request.law.name!r}")
        options = SpeculativeOptions(k=self.k)

        drafts = getattr(self, "batch_drafts", None)  # a test's draft source per request index (default: new_draft)

        def loop(index: int, request: Any) -> Callable[[Any], SpeculativeResult]:
            seed = request.seed if request.seed is not None else int(self.unseeded.integers(0, 2**63 - 1))
            one = GenerationRequest(tuple(request.prompt_ids), request.params, max_tokens=request.max_tokens, seed=seed)
            draft = self.new_draft() if drafts is None else drafts(index, len(requests))
            return lambda model: speculative_generate(
                model, self.tokenizer, one, draft, options, law=self.law, draw=self.draw
            )

        loops = [loop(index, request) for index, request in enumerate(requests)]
        if self.batch_slots > 1 and len(loops) > 1 and getattr(self.model, "batches_spans", False):
            results = run_lockstep(self.model, loops, self.batch_slots)
        else:
            results = [run(self.model) for run in loops]
        return [
            {"ids": list(r.generation.ids), "cycles": [[len(c.drafted), c.accepted] for c in r.cycles]} for r in results
        ]

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[dict[str, Any]]:
        """n whole generations, speculation on, each with its cycles ``[drafted, accepted]``."""
        from verispec.engine.lockstep import run_lockstep
        from verispec.reference.decode import SpeculativeOptions, SpeculativeResult, speculative_generate
        from verispec.reference.session import GenerationRequest

        if min_tokens:
            raise VerispecError("the engine's decode loop has no min_tokens")
        requests = [
            GenerationRequest(tuple(prompt_ids), params, max_tokens=max_tokens, seed=generation_seed(seed, index))
            for index in range(n)
        ]
        options = SpeculativeOptions(k=self.k)

        def loop(request: GenerationRequest) -> Callable[[Any], SpeculativeResult]:
            return lambda model: speculative_generate(
                model, self.tokenizer, request, self.new_draft(), options, law=self.law, draw=self.draw
            )

        loops = [loop(request) for request in requests]
        if self.batch > 1 and n > 1 and getattr(self.model, "batches_spans", False):
            results = run_lockstep(self.model, loops, self.batch)
        else:
            results = [run(self.model) for run in loops]
        return [
            {"ids": list(r.generation.ids), "cycles": [[len(c.drafted), c.accepted] for c in r.cycles]} for r in results
        ]

    def forced_rows(self, sequence: Sequence[int], prompt_length: int) -> Any:
        """The logits predicting each generated id: one pass over ``sequence[:-1]`` [T, V]."""
        ids = [int(t) for t in sequence[:-1]]
        logits = self.model.forward(ids, self.model.new_cache(len(ids))).logits
        return np.asarray(logits[prompt_length - 1 :], dtype=np.float32)


def generation_seed(seed: int, index: int) -> int:
    """The seed of generation ``index`` of the block seeded ``seed`` (distinct pairs, distinct streams)."""
    return int(np.random.SeedSequence([int(seed) & (2**63 - 1), int(index)]).generate_state(2, np.uint64)[0] >> 1)
