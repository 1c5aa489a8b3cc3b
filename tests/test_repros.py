"""The upstream-report reproductions of examples/repros/ still show BROKEN and FIXED.

Each model-free repro measures its defect on the installed (or transcribed) code, then with the
minimal fix applied as a monkeypatch; these tests pin both outcomes and that the patch is undone.
Counts are exact (deterministic code, no sampling), so no tolerance is involved.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPROS = Path(__file__).resolve().parents[1] / "examples" / "repros"


def load_repro(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"repro_{name}", REPROS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_every_repro_is_indexed_in_the_readme() -> None:
    index = (REPROS / "README.md").read_text()
    scripts = sorted(path.name for path in REPROS.glob("*.py"))
    assert len(scripts) == 5
    for script in scripts:
        assert script in index, script


def test_transformers_uag_scatter_order_is_broken_and_the_fix_mends_it() -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    repro = load_repro("transformers_uag_scatter_order")
    outcome = repro.measure()
    broken, total = outcome["BROKEN"]
    # the vocabulary order is random per process: a random permutation of 41 ids leaves on average
    # one fixed point, so at least half mismatched is a safe floor (P(>= 21 fixed points) ~ 1e-20)
    assert total == 41
    assert broken > total // 2
    assert outcome["FIXED"] == (0, total)
    # the monkeypatch is undone: the installed class is broken again afterwards
    assert repro.count_mismatches(repro.build_translator())[0] > total // 2


def test_transformers_fix_applies_only_to_the_pruned_branch() -> None:
    pytest.importorskip("transformers")
    repro = load_repro("transformers_uag_scatter_order")
    assert repro.AssistantToTargetTranslator.get_target_logits is repro.ORIGINAL_GET_TARGET_LOGITS
    with repro.patched_translator():
        assert repro.AssistantToTargetTranslator.get_target_logits is repro.fixed_get_target_logits
    assert repro.AssistantToTargetTranslator.get_target_logits is repro.ORIGINAL_GET_TARGET_LOGITS


def test_llama_cpp_processor_history_stub() -> None:
    outcome = load_repro("llama_cpp_processor_history").measure()
    seeing, calls = outcome["BROKEN"]
    # every call after the first has the (always rejected) drafts of its cycle in the array
    assert (seeing, calls) == (23, 24)
    assert outcome["FIXED"] == (0, 24)


def test_mlx_lm_speculative_prefill_history_stub() -> None:
    outcome = load_repro("mlx_lm_speculative_prefill_history").measure()
    assert outcome["BROKEN speculative"] == (11, 12)
    assert outcome["FIXED speculative"] == (0, 12)
    assert outcome["plain <= 0.32.0"] == (11, 12)
    assert outcome["plain after #1777"] == (0, 12)


def test_openvino_lookup_min_new_tokens_stub() -> None:
    outcome = load_repro("openvino_genai_lookup_min_new_tokens").measure()
    assert outcome["BROKEN"] == (1, 2)  # the stop token at index 1, before min_new_tokens 8
    assert outcome["FIXED"] == (0, 9)  # banned through index 7, emitted at index 8


def test_openvino_draft_crash_repro_says_what_it_needs(capsys: pytest.CaptureFixture[str]) -> None:
    repro = load_repro("openvino_genai_draft_sampled_crash")
    if repro.library_available():
        pytest.skip("openvino-genai is installed: the crash repro needs models and minutes, not run here")
    assert repro.main(["openvino_genai_draft_sampled_crash.py"]) == 2
    assert "NEEDS: openvino-genai" in capsys.readouterr().out


@pytest.mark.parametrize(
    "name",
    [
        "transformers_uag_scatter_order",
        "llama_cpp_processor_history",
        "mlx_lm_speculative_prefill_history",
        "openvino_genai_lookup_min_new_tokens",
    ],
)
def test_each_model_free_repro_exits_1_while_broken(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    if name.startswith("transformers"):
        pytest.importorskip("transformers")
    assert load_repro(name).main() == 1
    printed = capsys.readouterr().out
    assert "BROKEN" in printed and "FIXED" in printed
