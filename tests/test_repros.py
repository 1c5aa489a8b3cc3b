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
    assert outcome["plain <= 0.31.3"] == (11, 12)
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


# The installed libraries' fixes (the gate's --patched runs) recompile one function from the
# installed source with one line changed. Shown here on stand-in packages that quote the released
# lines (the real libraries are optional: tests/test_peers_llama_cpp.py and the peer venvs).
FAKE_LLAMA = """
class Llama:
    def __init__(self, ids, n_tokens):
        self.input_ids, self.n_tokens, self.seen = list(ids), n_tokens, []

    @property
    def _input_ids(self):
        return self.input_ids[: self.n_tokens]

    def _init_sampler(self, logits_processor=None):
        class recarray:
            logit = [0.0]

        def apply_func():
            for logit_processor in logits_processor:
                recarray.logit[:] = logit_processor(self._input_ids, recarray.logit)

        return apply_func

    def sample(self, logits_processor=None, idx=None):
        self._init_sampler(logits_processor)()
"""
FAKE_MLX_GENERATE = """
def speculative_generate_step(prompt, logits_processors=None):
    y = prompt
    prev_tokens = None
    return prev_tokens
"""


def fake_package(root: Path, package: str, module: str, source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    (root / package).mkdir()
    (root / package / "__init__.py").write_text(f"def {module}():\n    pass\n")  # shadows the submodule, as mlx_lm's
    (root / package / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(root))
    for name in (package, f"{package}.{module}"):
        monkeypatch.delitem(sys.modules, name, raising=False)


def test_the_llama_fix_hands_the_processor_the_history_up_to_the_sampled_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_package(tmp_path, "llama_cpp", "llama", FAKE_LLAMA, monkeypatch)
    repro = load_repro("llama_cpp_processor_history")
    import importlib

    llama = importlib.import_module("llama_cpp.llama").Llama
    llm = llama([1, 2, 3, 40, 41], n_tokens=5)  # row 2 sampled while drafts 40, 41 are evaluated

    def record(ids: list[int], logit: list[float]) -> list[float]:
        llm.seen.append(list(ids))
        return logit

    llm.sample([record], idx=2)
    with repro.patched_llama():
        llm.sample([record], idx=2)
        llm.sample([record])  # no idx: the last evaluated row, as released
    llm.sample([record], idx=2)
    assert llm.seen == [[1, 2, 3, 40, 41], [1, 2, 3], [1, 2, 3, 40, 41], [1, 2, 3, 40, 41]]


def test_the_mlx_fix_seeds_the_history_with_the_prompt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_package(tmp_path, "mlx_lm", "generate", FAKE_MLX_GENERATE, monkeypatch)
    repro = load_repro("mlx_lm_speculative_prefill_history")
    import importlib

    module = importlib.import_module("mlx_lm.generate")
    undo = repro.install_mlx_lm_fix()
    assert module.speculative_generate_step([5, 6, 7], [print]) == [5, 6]
    assert module.speculative_generate_step([5, 6, 7]) is None  # no processors: no history kept
    undo()
    assert module.speculative_generate_step([5, 6, 7], [print]) is None


def test_a_fix_whose_line_changed_upstream_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_package(
        tmp_path, "mlx_lm", "generate", FAKE_MLX_GENERATE.replace("None\n    return", "[]\n    return"), monkeypatch
    )
    with pytest.raises(RuntimeError, match="the fix does not apply"):
        load_repro("mlx_lm_speculative_prefill_history").install_mlx_lm_fix()
