"""The ``--engine-cmd`` adapters of peers that live in their own venvs (examples/*_decoder_cmd.py).

Without any peer: the JSON-lines loop (examples/engine_cmd_wire.py) and the byte-level BPE
vocabulary that openvino-genai's GGUF reader needs (tests/support/synthetic.py). With a peer's venv
(``$VERISPEC_PEER_VENVS/NAME/bin/python``; skipped when the variable is unset or the venv absent,
as in ``make test`` and on a fresh clone): the adapter computes our numerics (the premise of judging it against our reference
forward) and its ops answer in shape. The verdicts themselves are long runs
(``python -m tests.support.peer_verdicts_cmd``, docs/peers.md "Other peers").
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.synthetic import VARIANTS, bpe_vocabulary, write_synthetic
from verispec.reference.model import Model

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))
from engine_cmd_wire import reply, serve  # noqa: E402

# mlx and openvino compute float32 on the same dequantized numbers: another float32 function, so
# tests/test_oracle_synthetic.py's tolerance and reasons (LOGIT_TOL; measured 9e-6 for mlx-lm)
LOGIT_TOL = 1e-3
PARAMS = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0, "repeat_last_n": 64}


def _answer(op: str, inp: dict[str, Any]) -> dict[str, Any]:
    if op == "logits":
        return {"logits": [0.0] * int(inp["v"])}
    if op == "refuse":
        raise ValueError("not this law")
    raise LookupError(op)


def test_the_wire_answers_output_error_and_unsupported() -> None:
    assert reply(_answer, json.dumps({"id": "a", "op": "logits", "input": {"v": 2}})) == {
        "id": "a",
        "output": {"logits": [0.0, 0.0]},
    }
    assert reply(_answer, json.dumps({"id": "b", "op": "refuse", "input": {}})) == {"id": "b", "error": "not this law"}
    assert reply(_answer, json.dumps({"id": "c", "op": "sample", "input": {}})) == {"id": "c", "unsupported": "sample"}
    out = io.StringIO()
    serve(_answer, io.StringIO('{"id": "1", "op": "x", "input": {}}\n\n{"id": "2", "op": "y", "input": {}}\n'), out)
    assert [json.loads(line)["id"] for line in out.getvalue().splitlines()] == [
        "1",
        "2",
    ]  # in order, blank lines skipped


def test_the_bpe_vocabulary_is_a_valid_bpe_one(tmp_path: Path) -> None:
    from verispec.reference.tokenizer import Tokenizer

    tokens, types, merges = bpe_vocabulary()
    assert len(set(tokens)) == len(tokens) == len(types)
    assert all(a + b in tokens for a, b in (m.split(" ") for m in merges))
    write_synthetic(
        tmp_path / "bpe.gguf",
        VARIANTS["tinyllama"],
        seed=3,
        quant_types=("F16",),
        file_type="MOSTLY_F16",
        tokenizer="bpe",
    )
    tok = Tokenizer.from_file(tmp_path / "bpe.gguf")
    ids = tok.encode("the model says the token is fast")
    assert tok.decode(ids) == "the model says the token is fast" and tok.eog_ids == {0, 2}
    assert len(ids) < len("the model says the token is fast")  # the merges apply


# -- with a peer's venv ------------------------------------------------------------------------------


def _venv_python(name: str) -> Path:
    """The peer venv's python. Opt-in: only with ``VERISPEC_PEER_VENVS`` set, so that ``make test``
    (and CI, on a machine that may hold such venvs by hand) never spends its time on peers."""
    import os

    root = os.environ.get("VERISPEC_PEER_VENVS")
    if not root:
        pytest.skip("set VERISPEC_PEER_VENVS (e.g. /work/venvs) to test the peers' adapters")
    python = Path(root) / name / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no {name} venv at {python} (docs/peers.md, Other peers: how to make it)")
    return python


def _ask(command: list[str], requests: list[dict[str, Any]], timeout: float = 600) -> list[dict[str, Any]]:
    """Run an adapter on a batch of requests; its answers, in order."""
    lines = "".join(json.dumps({"id": str(i), **r}) + "\n" for i, r in enumerate(requests))
    done = subprocess.run(command, input=lines, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("peer") / "tinyllama.gguf"
    write_synthetic(path, VARIANTS["tinyllama"], seed=3)
    return path


def test_mlx_lm_adapter_has_our_numerics_and_answers_every_op(tiny: Path, tmp_path: Path) -> None:
    python = _venv_python("mlx")
    prompt = [1, 5, 300, 40, 77, 12, 250, 3, 9, 100, 200]
    command = [
        str(python),
        "examples/mlx_lm_decoder_cmd.py",
        "--target",
        str(tiny),
        "--draft",
        str(tiny),
        "--cache",
        str(tmp_path),
    ]
    answers = _ask(
        command,
        [
            {"op": "logits", "input": {"prefix_ids": prompt, "split_at": None}},
            {"op": "logits", "input": {"prefix_ids": prompt, "split_at": 4}},
            {
                "op": "generate",
                "input": {"prompt_ids": prompt, "params": PARAMS, "max_tokens": 24, "min_tokens": 0, "n": 3, "seed": 1},
            },
            {"op": "greedy", "input": {"prompt_ids": prompt, "max_tokens": 16, "speculative": True}},
            {"op": "greedy", "input": {"prompt_ids": prompt, "max_tokens": 16, "speculative": False}},
            {
                "op": "generate",
                "input": {
                    "prompt_ids": prompt,
                    "params": {**PARAMS, "top_k": 8, "top_p": 0.9},
                    "max_tokens": 4,
                    "min_tokens": 0,
                    "n": 1,
                    "seed": 1,
                },
            },
            {"op": "sample", "input": {}},
        ],
    )
    ref = Model.load(tiny)
    ours = ref.forward(prompt, ref.new_cache(len(prompt))).logits[-1]
    for a in answers[:2]:
        assert float(np.max(np.abs(np.asarray(a["output"]["logits"]) - ours))) <= LOGIT_TOL
    for gen in answers[2]["output"]["samples"]:
        assert 1 <= len(gen["ids"]) <= 24
        assert sum(accepted + 1 for _, accepted in gen["cycles"]) >= len(gen["ids"])  # the cycles cover the ids
        assert all(0 <= accepted <= drafted <= 2 for drafted, accepted in gen["cycles"])
    assert answers[3]["output"]["ids"] == answers[4]["output"]["ids"]  # speculative greedy == plain greedy
    assert "top-p before top-k" in answers[5]["error"]  # a law it does not sample is refused
    assert answers[6] == {"id": "6", "unsupported": "sample"}


def test_openvino_genai_adapter_has_our_numerics(tmp_path: Path) -> None:
    python = _venv_python("openvino")
    target = tmp_path / "bpe.gguf"
    write_synthetic(
        target, VARIANTS["tinyllama"], seed=3, quant_types=("F16",), file_type="MOSTLY_F16", tokenizer="bpe"
    )
    prompt = [87, 261, 275, 271, 269, 271, 35, 266, 259, 261]
    command = [
        str(python),
        "examples/openvino_genai_decoder_cmd.py",
        "--target",
        str(target),
        "--mode",
        "prompt-lookup",
        "--cache",
        str(tmp_path / "cache"),
    ]
    answers = _ask(
        command,
        [
            {"op": "greedy", "input": {"prompt_ids": prompt, "max_tokens": 16, "speculative": True}},
            {"op": "greedy", "input": {"prompt_ids": prompt, "max_tokens": 16, "speculative": False}},
            {
                "op": "generate",
                "input": {
                    "prompt_ids": prompt,
                    "params": {**PARAMS, "temperature": 0.7, "top_p": 0.9},
                    "max_tokens": 4,
                    "min_tokens": 0,
                    "n": 1,
                    "seed": 1,
                },
            },
        ],
    )
    ref = Model.load(target)
    ids: list[int] = []
    for _ in range(16):  # our greedy decoding, one forward per step
        ids.append(int(np.argmax(ref.forward(prompt + ids, ref.new_cache(len(prompt) + len(ids))).logits[-1])))
    assert answers[0]["output"]["ids"] == answers[1]["output"]["ids"] == ids
    assert "after temperature" in answers[2]["error"]


# -- the reproductions fail against the released peers (minutes under load: slow) ------------------


@pytest.mark.slow
def test_mlx_lm_penalty_reproduction_fails_against_the_release() -> None:
    python = _venv_python("mlx")
    done = subprocess.run(
        [str(python), "examples/mlx_lm_speculative_penalty_repro.py"],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=REPO,
    )
    assert done.returncode == 1 and "DEFECT" in done.stdout, done.stdout + done.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize(
    "script", ["openvino_genai_lookup_min_tokens_repro.py", "openvino_genai_draft_sampling_repro.py"]
)
def test_openvino_genai_reproductions_fail_against_the_release(script: str, tmp_path: Path) -> None:
    from dataclasses import replace

    python = _venv_python("openvino")
    target, draft = tmp_path / "bpe.gguf", tmp_path / "bpe-1layer.gguf"
    write_synthetic(
        target, VARIANTS["tinyllama"], seed=3, quant_types=("F16",), file_type="MOSTLY_F16", tokenizer="bpe"
    )
    write_synthetic(
        draft,
        replace(VARIANTS["tinyllama"], name="tinyllama-1layer", n_layer=1),
        seed=4,
        quant_types=("F16",),
        file_type="MOSTLY_F16",
        tokenizer="bpe",
    )
    done = subprocess.run(
        [str(python), f"examples/{script}", str(target), str(draft)],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=REPO,
    )
    assert done.returncode == 1 and "DEFECT" in done.stdout, done.stdout + done.stderr[-2000:]


def test_the_runner_builds_the_patched_and_no_prefix_caching_commands() -> None:
    """``--patched`` reaches the mlx-lm adapter, ``--no-prefix-caching`` the openvino-genai one, ``--venv``
    the python run; each refuses the peer it means nothing for (no venv needed: only the command line)."""
    from tests.support.peer_verdicts_cmd import engine_command

    files = {k: Path(f"/m/{k}.gguf") for k in ("target", "bpe-target", "bpe-draft")}
    mlx = engine_command("mlx-lm", "speculative", files, venv="mlx-lm-0.31.3", patched=True)
    assert mlx.endswith("--draft /m/target.gguf --patched") and "/mlx-lm-0.31.3/bin/python" in mlx
    assert "--patched" not in engine_command("mlx-lm", "plain", files)
    ov = engine_command("openvino-genai", "draft", files, prefix_caching=False)
    assert ov.endswith("--no-prefix-caching")
    with pytest.raises(SystemExit, match="C\\+\\+"):
        engine_command("openvino-genai", "draft", files, patched=True)
    with pytest.raises(SystemExit, match="openvino-genai pipeline setting"):
        engine_command("mlx-lm", "speculative", files, prefix_caching=False)
