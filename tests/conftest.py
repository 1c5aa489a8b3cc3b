"""Fixtures shared by tests/: real models from the registry and the golden data.

Real models are installed by `make test` (`verispec models fetch ...`). A test marked ``model`` that
cannot find one fails with the one-line fetch hint rather than skipping: a skipped oracle test is
not a passed one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.tiny_gguf import write_tiny_gguf
from verispec.registry import resolve_model

DATA = Path(__file__).parent / "data"
GOLDEN = DATA / "golden"

# registry name -> key in golden.json
GOLDEN_KEYS = {"smollm2-135m": "smollm2-135m-q4_1", "gemma3-270m": "gemma3-270m-q4_k_m"}


@pytest.fixture(scope="session")
def golden() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / "golden.json").read_text())
    return data


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    return resolve_model("smollm2-135m")


@pytest.fixture(scope="session")
def gemma3_path() -> Path:
    return resolve_model("gemma3-270m")


@pytest.fixture(scope="session", params=["smollm2-135m", "gemma3-270m"])
def model_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


# -- reference models (loaded once per session) and tiny synthetic GGUF models ------------------------


@pytest.fixture(scope="session")
def smollm2_model(smollm2_path: Path) -> Any:
    """The dequantized reference model of smollm2-135m (loaded once per test session)."""
    from verispec.reference.model import Model

    return Model.load(smollm2_path)


@pytest.fixture(scope="session")
def gemma3_model(gemma3_path: Path) -> Any:
    """The dequantized reference model of gemma3-270m (loaded once per test session)."""
    from verispec.reference.model import Model

    return Model.load(gemma3_path)


# Test files that share a session fixture's expensive loads: under ``--dist loadgroup`` (the
# Makefile's) each group runs in one xdist worker, so the loads happen once (see
# pytest_xdist_make_scheduler below).
SHARED_LOAD_GROUPS = {
    "real-int8-models": (
        "tests/test_engine_backends.py",
        "tests/test_engine_fused.py",
        "tests/test_engine_io_binding.py",
        "tests/test_tree_int8.py",
        "tests/test_engine_forward_many.py",
        "tests/test_sparse_head.py",
        "tests/test_sparse_head_mode.py",
        "tests/test_heldout_early_exit.py",
    ),
    # the fast engine's f32 real models (f32_real_model)
    "real-f32-models": (
        "tests/test_engine.py",
        "tests/test_early_exit_kv.py",
        "tests/test_suffix_draft.py",
    ),
    # the same plain greedy runs and first-two-tokens law on the session's reference models
    # (tests/support/shared_decodes.py)
    "reference-decode-runs": (
        "tests/test_spec_equivalence.py",
        "tests/test_tree_decode.py",
    ),
}


@pytest.fixture(scope="session")
def int8_real_model(smollm2_path: Path, gemma3_path: Path) -> Callable[[str, bool | None], Any]:
    """Factory: ``int8_real_model(name, fused) -> FastModel``, the int8 mode of a real model on one
    layer path (``fused=None``: the default path, engine.fused.fused_default), loaded once per test
    process. A load costs 4-6 s of CPU (onnxruntime sessions for every matrix); four files use
    these four models. Requires that no test mutates a model: the tests only run forwards on
    caches of their own. The files that use it are one of ``SHARED_LOAD_GROUPS``, so under the
    Makefile's ``--dist loadgroup`` they run in one worker and share its loads."""
    from verispec.engine.fused import fused_default
    from verispec.engine.model import FastModel

    paths = {"smollm2-135m": smollm2_path, "gemma3-270m": gemma3_path}
    loaded: dict[tuple[str, bool], Any] = {}

    def get(name: str, fused: bool | None = None) -> Any:
        key = (name, fused_default() if fused is None else fused)
        if key not in loaded:
            loaded[key] = FastModel.load(paths[name], weights="int8", fused=key[1])
        return loaded[key]

    return get


@pytest.fixture(scope="session")
def f32_real_model(smollm2_path: Path, gemma3_path: Path) -> Callable[[str], Any]:
    """Factory: ``f32_real_model(name) -> FastModel``, the fast engine's default mode (f32 weights,
    ``load_model``'s defaults) of a real model, loaded once per test process. A load costs ~3-4 s of
    CPU (the whole model dequantized, an onnxruntime session per matrix). Requires that no test
    mutates a model: the tests only run forwards on caches of their own. The files that use it are
    one of ``SHARED_LOAD_GROUPS``, so under the Makefile's ``--dist loadgroup`` they share its loads."""
    from verispec.engine.model import FastModel

    paths = {"smollm2-135m": smollm2_path, "gemma3-270m": gemma3_path}
    loaded: dict[str, Any] = {}

    def get(name: str) -> Any:
        if name not in loaded:
            loaded[name] = FastModel.load(paths[name])
        return loaded[name]

    return get


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_path: Path) -> Any:
    from verispec.reference.tokenizer import Tokenizer

    return Tokenizer.from_file(smollm2_path)


@pytest.fixture(scope="session")
def gemma3_tokenizer(gemma3_path: Path) -> Any:
    from verispec.reference.tokenizer import Tokenizer

    return Tokenizer.from_file(gemma3_path)


@pytest.fixture
def tiny_gguf(tmp_path: Path) -> Any:
    """Factory: ``tiny_gguf(arch="llama", **options) -> Path`` of a small random GGUF model."""
    counter = iter(range(1_000_000))

    def make(arch: str = "llama", **options: Any) -> Path:
        return write_tiny_gguf(tmp_path / f"tiny-{arch}-{next(counter)}.gguf", arch, **options)

    return make


@pytest.fixture
def blas_single_thread() -> Any:
    """Run a test with one BLAS thread: the reference forward is mostly small matmuls, for which
    BLAS threads only add synchronisation, and on a shared 2-core runner they can slow it tenfold."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` (the Makefile's): tests go to xdist workers one at a time, as with
    ``--dist load``, except that each ``SHARED_LOAD_GROUPS`` entry, and each file that defines a
    module-scoped fixture, is one unit that a single worker runs whole: its shared loads (a model,
    a vector set, a built wheel) then happen once, not in every worker that got some of its tests.
    The units go out costliest first, by the CPU seconds tests/data/test_cpu.json measured
    (lab/measure/cpu_profile.py; a unit it does not list costs 0), then by size (xdist's
    ``--loadscopereorder``): a long file or test started last would leave the other worker idle
    while it ends, and the cheap single tests at the end keep the run's end fine-grained.
    (xdist's own ``loadgroup`` reads ``xdist_group`` marks by renaming ``item._nodeid``, which
    pytest 9 no longer reads: it would silently run as ``load``.) Other ``--dist`` values keep
    xdist's schedulers."""
    if config.getvalue("dist") != "loadgroup":
        return None
    import re
    from collections import OrderedDict

    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    group_of = {path: name for name, paths in SHARED_LOAD_GROUPS.items() for path in paths}
    module_fixture = re.compile(r"""@pytest\.fixture\([^)]*scope=["']module["']""")
    has_module_fixture: dict[str, bool] = {}

    def unit(nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        if path in group_of:
            return group_of[path]
        if path not in has_module_fixture:
            file = config.rootpath / path
            has_module_fixture[path] = file.is_file() and bool(module_fixture.search(file.read_text(encoding="utf-8")))
        return path if has_module_fixture[path] else nodeid

    measured = json.loads((DATA / "test_cpu.json").read_text(encoding="utf-8"))
    file_cpu: dict[str, float] = measured["files"]
    test_cpu: dict[str, float] = measured["tests"]

    def cost(scope: str) -> float:
        if scope in SHARED_LOAD_GROUPS:
            return sum(file_cpu.get(path, 0.0) for path in SHARED_LOAD_GROUPS[scope])
        return test_cpu.get(scope, 0.0) if "::" in scope else file_cpu.get(scope, 0.0)

    class SharedLoadScheduling(LoadScopeScheduling):  # type: ignore[misc]
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return unit(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if not self.ordered:  # the first assignment: the queue is whole (xdist's schedule())
                units = sorted(self.workqueue.items(), key=lambda item: -cost(item[0]))  # stable: then by size
                self.workqueue = OrderedDict(units)
                self.ordered = True
            super()._assign_work_unit(node)

    return SharedLoadScheduling(config, log)
