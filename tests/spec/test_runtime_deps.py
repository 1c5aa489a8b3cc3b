"""The shipped packages run with the runtime dependencies alone (numpy).

`verispec check`, `vectors` and `witness` import spec/ at run time, so spec/ (and reference/,
engine/, verispec/) must not need a package that only the `dev` or `oracle` extra installs. A fresh
environment per test run is too slow here; instead a subprocess refuses every dev/oracle package
with an import hook, imports every shipped module, and runs the three spec commands on a small
scale (the statistical property runs the power analysis, the witness the chi-square). proofs/ is
left out: `python -m verispec.proofs` needs z3 by design (the `dev` extra); so is the pytest plugin,
which only pytest loads.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# every top-level package of the `dev` and `oracle` extras (pyproject.toml), by import name
DEV_ONLY = (
    "pytest",
    "_pytest",
    "hypothesis",
    "scipy",
    "z3",
    "mypy",
    "gguf",
    "threadpoolctl",
    "matplotlib",
    "torch",
    "transformers",
    "accelerate",
)
SHIPPED = ("verispec",)

SCRIPT = textwrap.dedent(
    """
    import importlib, importlib.abc, pkgutil, sys, tempfile

    BLOCKED = set(sys.argv[1].split(","))
    PYTEST_OR_Z3 = ("verispec.proofs", "verispec.pytest_plugin")

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None):
            if fullname.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"{fullname} is dev-only (blocked by the test)", name=fullname)
            return None

    already = sorted(name for name in sys.modules if name.split(".")[0] in BLOCKED)
    assert not already, f"imported before the hook: {already}"
    sys.meta_path.insert(0, Refuse())
    try:
        import scipy  # noqa: F401
    except ModuleNotFoundError:
        pass
    else:
        raise AssertionError("the hook does not block scipy")

    imported = 0
    for top in sys.argv[2].split(","):
        package = importlib.import_module(top)
        for info in pkgutil.walk_packages(package.__path__, top + "."):
            # __main__ runs the program; verispec.proofs needs z3 by design (the dev extra);
            # verispec.pytest_plugin is loaded by pytest itself (its pytest11 entry point)
            if info.name.rsplit(".", 1)[-1] != "__main__" and not info.name.startswith(PYTEST_OR_Z3):
                importlib.import_module(info.name)
                imported += 1

    from verispec.cli import main

    out = tempfile.mkdtemp()
    assert main(["vectors", "--out", out, "--count", "2"]) == 0
    assert main(["witness", "--steps", "200"]) == 0
    status = main(["check", "--verifier", "verispec.reference.speculative:verify_sampled", "--count", "2",
                   "--scale", "0.01", "--min-power", "0", "--only", "vectors_sampled", "stat_verdict_law_k1"])
    assert status == 0, status
    print(f"OK {imported} modules")
    """
)


def test_shipped_packages_import_and_run_without_dev_packages(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, ",".join(DEV_ONLY), ",".join(SHIPPED)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-2000:]
    assert "OK " in result.stdout
