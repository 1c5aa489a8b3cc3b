"""spec/protocol.md's pseudocode EXECUTED: the normative text itself decides every sampled vector.

The two fenced blocks of the section "The verdict" (the verdict loop and ``draw(w, u)``) are read
from the file, translated to Python by the fixed, purely textual rules of :data:`RULES` (subscripts
to indexing, ``a .. b`` ranges, ``max`` to numpy's elementwise maximum, the verdict tuple to a
dict, two named phrases), and run on every valid case of the shipped ``sampled`` and
``sampled_large`` vectors; their verdicts must equal the vectors' expected ones exactly. So an edit
of the text that changes what it means fails here, and so does a vector the text would not give.
Cases that break the contract (expected ``error``) are left out: the blocks assume the contract,
which tests/test_vectors.py checks for those cases.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from verispec.spec.vectors import build_vectors
from verispec.spec.vectors.gen_large import expand

PROTOCOL = Path(__file__).resolve().parents[2] / "spec" / "protocol.md"

# (pattern, replacement), applied in order to each line of a block; nothing else is rewritten
RULES: tuple[tuple[str, str], ...] = (
    (r"\s*#.*$", ""),  # comments
    (r"^draw\(w, u\):$", "def draw(w, u):"),
    (r"running sum of (\w+) over ids 0 \.\. V-1", r"np.cumsum(\1, dtype=np.float64)"),
    (r"for (\w+) in (\w+) \.\. (\w+)-1:", r"for \1 in range(\2, \3):"),
    (r"\bmax\(", "np.maximum("),  # elementwise, as the block's comment says
    (r"largest (\w+) with (.+)$", r"max(\1 for \1 in range(V) if \2)"),
    (r"\b([pqux])_(\w+)\b", r"\1[\2]"),  # p_i -> p[i], q_i[x_i] -> q[i][x[i]], u_k -> u[k]
    (r"\(accepted = (\w+), token = (.+), kind = (\w+)\)$", r"dict(accepted=\1, token=\2, kind='\3')"),
)


def protocol_blocks() -> list[str]:
    """The fenced blocks of the section "The verdict", in order (the verdict loop, then the draw)."""
    text = PROTOCOL.read_text(encoding="utf-8")
    section = text.split("## The verdict", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```\n(.*?)^```$", section, flags=re.DOTALL | re.MULTILINE)


def translate(block: str) -> str:
    lines = []
    for line in block.splitlines():
        for pattern, replacement in RULES:
            line = re.sub(pattern, replacement, line)
        lines.append(line)
    return "\n".join(line for line in lines if line.strip())


def executable_protocol() -> Callable[..., dict[str, Any]]:
    """verdict(p [k+1, V], q [k, V], x [k], u [k+1]) -> {accepted, token, kind}, from the text."""
    verdict_block, draw_block = protocol_blocks()
    draw_source = translate(draw_block).replace("def draw(w, u):", "def draw(w, u):\n    V = len(w)", 1)
    body = "\n".join("    " + line for line in translate(verdict_block).splitlines())
    source = f"{draw_source}\n\ndef verdict(p, q, x, u):\n    k = len(x)\n{body}\n"
    namespace: dict[str, Any] = {"np": np}
    exec(compile(source, str(PROTOCOL), "exec"), namespace)
    fn: Callable[..., dict[str, Any]] = namespace["verdict"]
    return fn


def test_the_text_has_the_two_blocks_and_they_translate() -> None:
    verdict_block, draw_block = protocol_blocks()
    assert "u_i * q_i[x_i] < p_i[x_i]" in verdict_block and "return largest t" in draw_block
    assert "u[i] * q[i][x[i]] < p[i][x[i]]" in translate(verdict_block)
    assert "np.cumsum(w, dtype=np.float64)" in translate(draw_block)


def test_the_text_follows_the_subnormal_fallback() -> None:
    """u * total rounds up to total: no id crosses, the largest id of positive weight (not V - 1)."""
    verdict = executable_protocol()
    p = np.array([[0.5 - 1e-7, 5e-324, 0.0, 0.5], [0.25, 0.25, 0.25, 0.25]])
    q = np.array([[0.5, 0.0, 0.0, 0.5]])
    assert verdict(p, q, [0], [0.9999999, 0.9]) == {"accepted": 0, "token": 1, "kind": "repair"}


def _sampled_cases() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    vectors = build_vectors()
    out = []
    for case in vectors.cases["sampled"] + vectors.cases["sampled_large"]:
        if case["expected"].get("error"):
            continue
        inp = expand(case["input"]) if case["op"] == "sampled_large" else case["input"]
        out.append((str(case["id"]), inp, case["expected"]))
    return out


def test_the_text_decides_every_sampled_vector() -> None:
    verdict = executable_protocol()
    cases = _sampled_cases()
    assert len(cases) > 100  # the shipped sampled + sampled_large vectors, contract breaches aside
    for case_id, inp, expected in cases:
        p = np.asarray(inp["p"], dtype=np.float64)
        q = np.asarray(inp["q"], dtype=np.float64)
        got = verdict(p, q, [int(x) for x in inp["drafts"]], [float(u) for u in inp["uniforms"]])
        assert {"accepted": got["accepted"], "token": int(got["token"]), "kind": got["kind"]} == expected, case_id


@pytest.mark.parametrize(
    "edit",
    [("u_i * q_i[x_i] < p_i[x_i]", "u_i * q_i[x_i] <= p_i[x_i]"), ("if u * total < c[t]", "if u * total <= c[t]")],
)
def test_a_changed_text_is_caught(edit: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The check has teeth: one character of the text changed and some vector disagrees."""
    original = protocol_blocks()
    monkeypatch.setattr(sys.modules[__name__], "protocol_blocks", lambda: [b.replace(*edit) for b in original])
    assert any(edit[0] in b for b in original)
    verdict = executable_protocol()
    disagree = 0
    for _, inp, expected in _sampled_cases():
        got = verdict(np.asarray(inp["p"]), np.asarray(inp["q"]), inp["drafts"], inp["uniforms"])
        disagree += {"accepted": got["accepted"], "token": int(got["token"]), "kind": got["kind"]} != expected
    assert disagree > 0
