"""A correct decoder of ANOTHER ecosystem's law: it passes check-decoder under that law and fails
under the verispec law, where the two laws differ by a clear total variation.

The decoder is our speculative loop (spec/decoder/mutants.py, no bug) whose verified rows follow
transformers' chain (``LoopDecoder(target=...)``: temperature BEFORE top-p), on the tiny synthetic
model of tests/test_decoder_depth.py. At temperature 1.5 and top_p 0.8 transformers' top-p acts on
the tempered (flatter) law and keeps many more tokens than verispec's, which acts at temperature 1:
the test first asserts the two first-token laws differ by TV >= 0.2 (a precondition, computed: 0.22),
so a gate that knows only the verispec law false-alarms on this correct decoder, and the
``--law transformers`` gate does not.

Alpha: the pass runs draw the ``decoder_laws`` line of spec.statistics.ALPHA_BUDGET (a third each
to the first-m run, the depth run and the run through ``verispec.check_decoder``); the fail runs use check-decoder's default 1e-3 with power 0.99
against the TV the precondition guarantees. The depth runs use a weaker stated design than the product's, for cost:
generations of 8 tokens, power 0.99 against TV 0.2 on every position.
The first-m runs test the first token (m = 1), where the precondition's TV lives.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.support.tiny_gguf import one_layer_model
from verispec import cli
from verispec.reference.model import Model
from verispec.reference.sampling import SamplingParams
from verispec.spec.decoder import laws
from verispec.spec.decoder.check import LawCase, ReferenceLogits, check_law
from verispec.spec.decoder.depth.law import DepthCase, check_depth, reference_rows
from verispec.spec.decoder.first_tokens import CachedLaw
from verispec.spec.decoder.mutants import LoopDecoder
from verispec.spec.statistics import ALPHA_BUDGET

EOG = 2
PROMPT = (1, 5, 9, 13)
FLAGS = {"temperature": 1.5, "top_k": 0, "top_p": 0.8}
VERISPEC = SamplingParams(temperature=1.5, top_k=0, top_p=0.8, repeat_penalty=1.0)
DRAFT = SamplingParams(temperature=1.5, top_k=12)
PASS_ALPHA = ALPHA_BUDGET["decoder_laws"] / 3


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Model:
    return one_layer_model(tmp_path_factory.mktemp("laws") / "tiny.gguf", n_vocab=64)


def _decoder(model: Model, target: laws.Profile) -> LoopDecoder:
    return LoopDecoder(ReferenceLogits(model), DRAFT, 2, eog=frozenset({EOG}), law=CachedLaw(), target=target)


class Fresh:
    """The loop with fresh memos per generate call (bounded memory)."""

    def __init__(self, model: Model, target: laws.Profile) -> None:
        self.model, self.target = model, target

    def generate(self, *args: object, **kwargs: object) -> object:
        return _decoder(self.model, self.target).generate(*args, **kwargs)  # type: ignore[arg-type]


def test_the_laws_differ_clearly(model: Model) -> None:
    row = np.asarray(ReferenceLogits(model)(PROMPT))
    hf = laws.build("transformers", FLAGS, eog=[EOG])(row, PROMPT, [])
    ours = laws.build("verispec", {**FLAGS, "repeat_penalty": 1.0}, eog=[EOG])(row, PROMPT, [])
    assert 0.5 * float(np.abs(hf - ours).sum()) >= 0.2  # what the first-m runs are powered against


def test_first_m_passes_its_law_and_fails_verispec(model: Model) -> None:
    hf = laws.build("transformers", FLAGS, eog=[EOG])
    logits = ReferenceLogits(model)
    decoder = _decoder(model, hf)
    own = check_law(
        decoder, logits, LawCase(PROMPT, hf.legacy, 1, 0.01, frozenset({EOG}), hf), alpha=PASS_ALPHA, tv=0.2
    )
    assert own.passed, own.detail
    other = check_law(decoder, logits, LawCase(PROMPT, VERISPEC, 1, 0.01, frozenset({EOG})), alpha=1e-3, tv=0.2)
    assert not other.passed, other.detail


def test_depth_passes_its_law_and_fails_verispec(model: Model) -> None:
    hf = laws.build("transformers", FLAGS, eog=[EOG])
    engine = Fresh(model, hf)
    rows = reference_rows(model)
    own = check_depth(
        engine,
        rows,
        DepthCase(PROMPT, hf.legacy, 8, frozenset({EOG}), 0, hf),
        alpha=PASS_ALPHA,
        tv=0.2,
        fraction=1.0,
        pilot=16,
    )
    assert own.passed, f"{own.where}: {own.detail}"
    other = check_depth(
        engine, rows, DepthCase(PROMPT, VERISPEC, 8, frozenset({EOG})), alpha=1e-3, tv=0.2, fraction=1.0, pilot=16
    )
    assert other.state == "failed", other.detail


def test_the_engine_is_told_the_law(model: Model) -> None:
    """A non-default law reaches the engine as ``law=`` (the default law never does: old engines work)."""
    seen: list[object] = []

    class Spy:
        def generate(
            self,
            prompt_ids: object,
            params: object,
            max_tokens: int,
            n: int,
            seed: int,
            min_tokens: int = 0,
            **kwargs: object,
        ) -> list[list[int]]:
            seen.append(kwargs.get("law"))
            return [[EOG]] * n

    hf = laws.build("transformers", FLAGS, eog=[EOG])
    rows = reference_rows(model)
    check_depth(Spy(), rows, DepthCase(PROMPT, hf.legacy, 16, frozenset({EOG}), 0, hf), alpha=1e-3, tv=0.1, pilot=8)
    check_depth(Spy(), rows, DepthCase(PROMPT, VERISPEC, 16, frozenset({EOG})), alpha=1e-3, tv=0.1, pilot=8)
    assert seen[0] == hf and seen[-1] is None


def test_cli_flag_the_law_lacks_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "absent.gguf")  # refused before the model loads
    assert (
        cli.main(
            [
                "check-decoder",
                "--model",
                missing,
                "--engine-cmd",
                "true",
                "--law",
                "transformers",
                "--frequency-penalty",
                "0.5",
            ]
        )
        == 2
    )
    assert "--frequency-penalty is not a parameter of --law transformers" in capsys.readouterr().err
    assert (
        cli.main(
            ["check-decoder", "--model", missing, "--engine-cmd", "true", "--law", "llama.cpp", "--min-tokens", "2"]
        )
        == 2
    )
    assert "--min-tokens is not a parameter of --law llama.cpp" in capsys.readouterr().err
    assert cli.main(["check-decoder", "--model", missing, "--ours", "--law", "vllm"]) == 2
    assert cli.main(["check-decoder", "--model", missing, "--mutant", "bonus_kv_dropped", "--law", "vllm"]) == 2
    assert (
        cli.main(
            ["check-decoder", "--model", missing, "--engine-cmd", "true", "--law", "vllm", "--target-law", "two-sample"]
        )
        == 2
    )


ECHO_ENGINE = r"""
import json, sys
for line in sys.stdin:
    req = json.loads(line)
    inp = req["input"]
    law = inp.get("law")
    token = 0 if law is None else len(law["name"])  # the answer says which law arrived
    with open(sys.argv[1], "a") as seen:
        seen.write(json.dumps(law) + "\n")
    print(json.dumps({"id": req["id"], "output": {"samples": [[token]] * inp["n"]}}), flush=True)
"""


def test_the_wire_carries_the_law(tmp_path: Path) -> None:
    """A program receives ``"law": {"name", "params"}`` for a non-default law, nothing otherwise."""
    import json
    import sys

    from verispec.spec.decoder.check import CommandEngine

    stub, seen = tmp_path / "engine.py", tmp_path / "seen.jsonl"
    stub.write_text(ECHO_ENGINE)
    engine = CommandEngine(f"{sys.executable} {stub} {seen}", timeout=30)
    vllm = laws.build("vllm", {"presence_penalty": 0.5, "min_tokens": 2}, eog=[EOG])
    try:
        assert engine.sample([1], VERISPEC, 1, 2, 0) == [[0]] * 2
        assert engine.sample([1], vllm.legacy, 1, 2, 0, law=vllm) == [[4]] * 2
        assert engine.generate([1], vllm.legacy, 4, 1, 0, 2, law=vllm) == [[4]]
    finally:
        engine.close()
    lines = [json.loads(line) for line in seen.read_text().splitlines()]
    assert lines[0] is None and lines[1] == lines[2] == vllm.to_json()
    assert laws.from_json(lines[1]) == vllm and lines[1]["params"]["stop_token_ids"] == [EOG]


def test_check_decoder_api_hands_the_law_to_the_engine(tmp_path: Path) -> None:
    """Through ``verispec.check_decoder(law="transformers", ...)`` on a synthetic GGUF with a real
    tokenizer: the engine is built by a factory, receives the profile as ``law=`` and samples it
    (our loop following the law it is told): it passes the first-m test at the budget's alpha."""
    from tests.support.synthetic import Variant, write_synthetic
    from verispec import check_decoder

    path = tmp_path / "tiny.gguf"
    write_synthetic(
        path,
        Variant("tiny", "llama", "tiny llama", n_embd=32, n_layer=1, n_head=4, n_head_kv=2, n_ff=48),
        quant_types=("F16",),
    )
    told: list[object] = []

    class Engine:
        def __init__(self, model_path: Path) -> None:
            self.loop = LoopDecoder(ReferenceLogits(Model.load(model_path)), DRAFT, 2, law=CachedLaw())

        def sample(
            self, prompt_ids: object, params: SamplingParams, m: int, n: int, seed: int, law: laws.Profile | None = None
        ) -> list[list[int]]:
            told.append(law)
            return self.loop.sample(prompt_ids, params, m, n, seed, law=law)  # type: ignore[arg-type]

    report = check_decoder(
        Engine,
        model=path,
        prompts=["the model"],
        depth=0,
        m=1,
        law="transformers",
        temperature=1.5,
        top_k=0,
        top_p=0.8,
        alpha=PASS_ALPHA,
    )
    assert report.passed, report.summary()
    profile = told[0]
    assert isinstance(profile, laws.Profile) and profile.name == "transformers"
    assert profile.params.temperature == 1.5 and profile.params.top_p == 0.8 and profile.params.top_k == 0
