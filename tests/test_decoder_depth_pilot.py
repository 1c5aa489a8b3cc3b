"""A pilot that yields no row to design the depth test on says why (its generations' own reason),
the first malformed generation's reason, not a bare "all malformed"; the case fails with it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tests.support.tiny_gguf import write_tiny_gguf
from verispec.reference.model import Model
from verispec.reference.sampling import SamplingParams
from verispec.spec.decoder.depth.law import DepthCase, check_depth, reference_rows


class Empty:
    """Answers every request with empty generations (no token, no end-of-generation token)."""

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[list[int]]:
        return [[] for _ in range(n)]


def test_an_empty_pilot_fails_with_its_reason(tmp_path: Path) -> None:
    model = Model.load(
        write_tiny_gguf(
            tmp_path / "tiny.gguf",
            n_vocab=64,
            n_embd=32,
            n_layer=1,
            n_head=4,
            n_head_kv=2,
            context_length=256,
            weight_scale=1.0,
        )
    )
    case = DepthCase((1, 2, 3), SamplingParams(temperature=1.0), 8, frozenset({0}), 0)
    verdict = check_depth(Empty(), reference_rows(model), case, alpha=1e-3, pilot=4)
    assert verdict.state == "failed"
    assert (
        "all 4 pilot generations are malformed, the first as pilot generation 1: stopped at 0 of max_tokens = 8"
        in verdict.where
    )
