"""`check-decoder --ours --weights MODE`: the fast engine's own speculative decoder at depth.

- Its target law is the same engine's rows from ONE teacher-forced pass per generation; that
  these are the rows its decoding saw (bit for bit: the engine's k-row pass == its 1-row passes)
  is checked on a generation of the tiny synthetic llama (int8 mode; float matrices stay float32
  there) and, marked ``model``, of SmolLM2 (the real int8 kernels).
- Each generation's stream is fixed by (block seed, index): the same block twice is the same,
  another seed is another; with either draft (``auto``, the default: token trees with a fixed cost
  curve; ``ngram``: the chain).
- The auto-draft decoder (token trees met on many cycles) passes a small depth design against its
  own rows, and a mutant of it whose verification accepts every drafted node whatever its p is
  rejected.
- Through the command: a budget that ends after the pilot is inconclusive (exit 3), with 1 and
  2 workers; usage errors for weights without ours, and for a mode the engine path lacks.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.synthetic import Variant, write_synthetic
from verispec import cli
from verispec.decoder.ours import EngineDecoder
from verispec.reference.draft_choice import AutoDraft
from verispec.reference.sampling import SamplingParams
from verispec.reference.tree_speculative import DraftTree
from verispec.spec.decoder.depth.law import DepthCase, check_depth

TINY = Variant("tiny", "llama", "tiny llama", n_embd=32, n_layer=1, n_head=4, n_head_kv=2, n_ff=48)
PARAMS = SamplingParams(temperature=1.0, top_k=0, repeat_penalty=1.5)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("engine-decoder") / "tiny.gguf"
    write_synthetic(path, TINY, quant_types=("F16",))
    return path


def forced_equals_incremental(decoder: EngineDecoder, prompt: tuple[int, ...], generated: list[int]) -> bool:
    """The one-pass rows of prompt + generation == the prompt pass then one 1-row pass per token."""
    forced = decoder.forced_rows(list(prompt) + generated, len(prompt))
    model = decoder.model
    cache = model.new_cache(len(prompt) + len(generated))
    rows = [model.forward(list(prompt), cache).logits[-1]]
    rows += [model.forward([t], cache).logits[-1] for t in generated[:-1]]
    return bool(np.array_equal(forced, np.stack(rows)))


def prompt_of(decoder: EngineDecoder, text: str) -> tuple[int, ...]:
    tokenizer = decoder.tokenizer
    return tuple(tokenizer.encode(text, add_bos=tokenizer.add_bos, parse_special=True))


@pytest.mark.parametrize("draft", ["ngram", "auto"])
def test_blocks_are_fixed_by_their_seed_and_rows_are_the_decoders(tiny_model: Path, draft: str) -> None:
    decoder = EngineDecoder(tiny_model, "int8", draft=draft)
    prompt = prompt_of(decoder, "the model")
    first = decoder.generate(prompt, PARAMS, 12, 3, seed=5)
    assert decoder.generate(prompt, PARAMS, 12, 3, seed=5) == first
    assert decoder.generate(prompt, PARAMS, 12, 3, seed=6) != first
    for generation in first:
        assert sum(accepted + 1 for _, accepted in generation["cycles"]) >= len(generation["ids"])
        assert forced_equals_incremental(decoder, prompt, generation["ids"])


# The auto draft's depth runs: top-k 3 (a draft token outside it is emitted only by a broken
# verification, which the depth test then fails outright) and a flat cost curve, under which every
# proposal the suffix and prompt-lookup proposers make pays, so trees are met on many cycles of
# a random tiny model (the product's curve prunes most of them there).
TREE_PARAMS = SamplingParams(temperature=1.0, top_k=3, repeat_penalty=1.0)
FLAT_COST = {rows: 1.0 for rows in range(1, 14)}
DEPTH_ALPHA = 1e-4


class Recording(EngineDecoder):
    """The engine decoder, keeping the cycles of every generation it returns."""

    cycles: list[list[int]]

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[dict[str, Any]]:
        out = super().generate(prompt_ids, params, max_tokens, n, seed, min_tokens)
        for generation in out:
            self.cycles.extend(generation["cycles"])
        return out


class AcceptingEveryNode(AutoDraft):
    """A broken tree verification: each drafted node's token is made the target's sure choice at its
    parent's row, so every drafted node is accepted whatever its p."""

    def score_tree(self, pending: Sequence[int], tree: DraftTree) -> Any:
        logits = np.array(super().score_tree(pending, tree), copy=True)
        for node in range(1, tree.size):
            logits[tree.parents[node], tree.tokens[node]] = logits.max() + 50.0
        return logits


class AcceptingDecoder(Recording):
    def new_draft(self) -> AcceptingEveryNode:
        return AcceptingEveryNode(cost=self.auto_cost, online=False)


def depth_run(decoder: Recording) -> Any:
    decoder.cycles, decoder.auto_cost = [], FLAT_COST
    prompt = prompt_of(decoder, "the model the model")
    case = DepthCase(prompt, TREE_PARAMS, 24, frozenset(decoder.tokenizer.eog_ids), 0)
    return check_depth(decoder, decoder.forced_rows, case, alpha=DEPTH_ALPHA, tv=0.1, fraction=1.0, pilot=16)


def test_the_auto_draft_decoder_passes_a_depth_run(tiny_model: Path) -> None:
    """Power 0.99 against TV 0.1 on every position (a weaker design than the product's, for cost)."""
    decoder = Recording(tiny_model, "int8", draft="auto")
    verdict = depth_run(decoder)
    print(f"auto draft: {verdict.state} {verdict.detail} power={verdict.power:.4f}")
    assert verdict.passed, verdict.detail
    assert verdict.power >= 0.99
    trees = [c for c in decoder.cycles if c[0] > 0]
    assert len(trees) >= 50 and sum(accepted for _, accepted in trees) >= 10  # verification was exercised


def test_accepting_every_drafted_node_is_rejected(tiny_model: Path) -> None:
    verdict = depth_run(AcceptingDecoder(tiny_model, "int8", draft="auto"))
    assert verdict.state == "failed", verdict.detail


def test_auto_tree_generations_are_fixed_by_their_seed(tiny_model: Path) -> None:
    """With trees on many cycles: the same block twice is the same tokens and cycles, and the
    one-pass rows are still bit for bit the rows the tree passes gave its decoding."""
    decoder = Recording(tiny_model, "int8", draft="auto")
    decoder.cycles, decoder.auto_cost = [], FLAT_COST
    prompt = prompt_of(decoder, "the model the model")
    first = decoder.generate(prompt, TREE_PARAMS, 24, 6, seed=11)
    assert any(c[0] > 0 and c[1] > 0 for c in decoder.cycles)  # an accepted tree node
    assert decoder.generate(prompt, TREE_PARAMS, 24, 6, seed=11) == first
    assert all(forced_equals_incremental(decoder, prompt, g["ids"]) for g in first)


def test_the_builder_defaults_to_the_auto_draft(tiny_model: Path) -> None:
    """check-decoder --ours --weights judges what ``generate --draft`` runs unless told otherwise."""
    from verispec.decoder.api import build_engine
    from verispec.decoder.options import DecoderUnderTest, DraftFlags

    built = build_engine(DecoderUnderTest(ours=True, weights="int8", model=tiny_model), tiny_model)
    assert built.draft_kind == "auto"
    chain = DecoderUnderTest(ours=True, weights="int8", model=tiny_model, draft=DraftFlags(draft_kind="ngram"))
    assert build_engine(chain, tiny_model).draft_kind == "ngram"


@pytest.mark.model
def test_smollm2_int8_forced_rows_are_its_decoding_rows(smollm2_path: Path) -> None:
    decoder = EngineDecoder(smollm2_path, "int8")
    prompt = prompt_of(decoder, "The cat sat on the")
    (generation,) = decoder.generate(
        prompt, SamplingParams(temperature=1.0, top_k=4, repeat_penalty=1.5), 10, 1, seed=3
    )
    assert decoder.weights == "int8" and forced_equals_incremental(decoder, prompt, generation["ids"])


def run(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, object]]:
    status = cli.main(
        [
            "check-decoder",
            "--model",
            str(path),
            "--prompt",
            "the model",
            "--depth",
            "8",
            "--top-k",
            "0",
            "--ours",
            "--weights",
            "int8",
            "--json",
            *extra,
        ]
    )
    return status, json.loads(capsys.readouterr().out)


def test_the_command_runs_the_engine_decoder_in_workers(tiny_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for workers in ("2",):  # the checker-side path is the same with 1 (tests/test_decoder_workers.py)
        status, report = run(tiny_model, capsys, "--budget", "0.001", "--workers", workers)
        result = report["results"][0]  # type: ignore[index]
        assert (status, result["state"], result["mode"]) == (3, "inconclusive", "depth")


def test_weights_usage_errors(tiny_model: Path) -> None:
    base = ["check-decoder", "--model", str(tiny_model)]
    assert cli.main([*base, "--mutant", "bonus_kv_dropped", "--weights", "int8"]) == 2
    assert cli.main([*base, "--ours", "--weights", "int8", "--greedy"]) == 2
    assert cli.main([*base, "--ours", "--weights", "int8", "--target-law", "two-sample"]) == 2
    assert cli.main([*base, "--ours", "--weights", "int8", "--depth", "0"]) == 2
    assert cli.main([*base, "--ours", "--draft-kind", "auto"]) == 2  # the engine decoder's draft: needs weights
    assert cli.main([*base, "--mutant", "bonus_kv_dropped", "--draft-kind", "ngram"]) == 2
