"""Native kernels: C sources shipped with the package, compiled here once, loaded with ctypes.

The wheel stays pure Python (``py3-none-any``): a kernel's C source is package data
(engine/kernels/), compiled on first use with the system C compiler (``$CC``, else ``cc``,
``gcc`` or ``clang``) into a content-addressed cache, and reused by every later process. The cache
key covers the source, the headers beside it (engine/kernels/*.h, shared by the kernels), the
compiler's identity and the flags, so an edit or another compiler builds anew. Each function picks
its instruction set at run time (GCC/Clang ``target`` attributes and ``__builtin_cpu_supports``),
so one library serves every x86-64 CPU.

The cache is ``$VERISPEC_KERNEL_CACHE``, else ``kernels/`` under verispec's cache
(``$VERISPEC_CACHE`` or ``~/.cache/verispec``). A library is written under a temporary name and
renamed into place (two processes building at once each finish with a whole file), beside the
SHA-256 of its bytes; a library whose bytes do not match (truncated, tampered) is built again
before anything loads it. A cache that cannot be written builds into a temporary folder instead.

Every failure is :class:`NativeKernelUnavailable` with the reason; callers decide whether to fall
back (engine/tile_head.py computes the same bits in NumPy) or stop.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from verispec.reference.errors import NativeKernelUnavailable

KERNELS = Path(__file__).resolve().parent / "kernels"
# -ffp-contract=off: a kernel's law is written operation by operation (no fused multiply-adds).
FLAGS = ("-O2", "-ffp-contract=off", "-fno-fast-math", "-fPIC", "-shared", "-pthread")
COMPILE_TIMEOUT_S = 120
CACHE_ENV = "VERISPEC_KERNEL_CACHE"
DIGEST_READ_BYTES = 80  # of a digest file: bounded, whatever was written there


def cache_folder() -> Path:
    """Where built kernels live (module doc)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    root = os.environ.get("VERISPEC_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "verispec") / "kernels"


def compiler() -> str:
    """The C compiler's path; NativeKernelUnavailable when there is none."""
    named = os.environ.get("CC")
    for candidate in [named] if named else ["cc", "gcc", "clang"]:
        found = shutil.which(candidate)
        if found:
            return found
    raise NativeKernelUnavailable(f"no C compiler found ({'$CC=' + named if named else 'cc, gcc, clang'})")


def compiler_identity(cc: str) -> str:
    """The first line of ``cc --version``: part of the cache key."""
    try:
        done = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise NativeKernelUnavailable(f"{cc} --version failed: {error}") from None
    return (done.stdout.splitlines() or [""])[0]


def library_name(source: Path, cc: str) -> str:
    """``<stem>-<16 hex digits>.so``: the key hashes the source, the headers beside it (which it may
    include), the compiler, the flags, the machine."""
    key = hashlib.sha256()
    headers = [
        part for header in sorted(source.parent.glob("*.h")) for part in (header.name.encode(), header.read_bytes())
    ]
    for part in (source.read_bytes(), *headers, compiler_identity(cc).encode(), " ".join(FLAGS).encode()):
        key.update(part + b"\0")
    key.update(platform.machine().encode())
    return f"{source.stem}-{key.hexdigest()[:16]}.so"


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cached(library: Path) -> bool:
    """Whether ``library`` is whole: its bytes match the digest written beside it."""
    digest = library.with_name(library.name + ".sha256")
    try:
        with digest.open("rb") as fh:
            recorded = fh.read(DIGEST_READ_BYTES)  # 64 hex digits and a newline; a longer file is not ours
        return library.is_file() and recorded.strip() == sha256_of(library).encode()
    except OSError:
        return False


def _compile(cc: str, source: Path, target: Path) -> None:
    """Build ``target`` through a temporary name in its own folder, then its digest."""
    fd, partial = tempfile.mkstemp(prefix=target.name + ".", suffix=".partial", dir=target.parent)
    os.close(fd)
    try:
        try:
            done = subprocess.run(
                [cc, *FLAGS, "-o", partial, str(source), "-lm"],
                capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as error:
            raise NativeKernelUnavailable(f"compiling {source.name} failed: {error}") from None
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-12:])
            raise NativeKernelUnavailable(f"compiling {source.name} with {cc} failed:\n{tail}")
        digest = sha256_of(Path(partial))
        os.replace(partial, target)
        digest_partial = target.with_name(target.name + f".sha256.{os.getpid()}")
        digest_partial.write_text(digest + "\n")
        os.replace(digest_partial, target.with_name(target.name + ".sha256"))
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def _open(library: Path) -> ctypes.CDLL:
    try:
        return ctypes.CDLL(str(library))
    except OSError as error:
        raise NativeKernelUnavailable(f"{library} does not load: {error}") from None


@dataclass(frozen=True)
class Kernel:
    """A loaded C kernel library and the instruction set it runs."""

    library: ctypes.CDLL
    isa: str

    @property
    def name(self) -> str:
        return f"tile ({self.isa})"


@dataclass(frozen=True)
class KernelSpec:
    """How to load one kernel source: its ABI version, its instruction sets (name -> the C id, best
    first), the function binding its exports, and the names of its ABI and ISA query functions."""

    source: str
    abi: int
    isas: dict[str, int]
    bind: Callable[[ctypes.CDLL], None]
    abi_function: str
    supported_function: str


def load_kernel(spec: KernelSpec, wanted: str | None) -> Kernel:
    """``spec``'s library on ``wanted`` (a key of ``spec.isas``; None: the best this CPU supports).
    NativeKernelUnavailable when it cannot be built or loaded, has another ABI, or the CPU lacks
    ``wanted``."""
    library = load(spec.source)
    spec.bind(library)
    abi = getattr(library, spec.abi_function)()
    if abi != spec.abi:
        raise NativeKernelUnavailable(f"{spec.source}: ABI {abi}, expected {spec.abi}")
    supported = getattr(library, spec.supported_function)
    if wanted is not None:
        if not supported(spec.isas[wanted]):
            raise NativeKernelUnavailable(f"this CPU lacks {wanted}")
        return Kernel(library, wanted)
    return Kernel(library, next(name for name, code in spec.isas.items() if supported(code)))


def kernel_or_reason(load_one: Callable[[], Kernel], pinned_numpy: str | None) -> tuple[Kernel | None, str]:
    """``(kernel, its name)``, or ``(None, "tile (numpy: REASON)")`` where ``pinned_numpy`` names
    why NumPy was asked for or the kernel cannot run here (the callers then run their law in NumPy)."""
    if pinned_numpy is not None:
        return None, f"tile (numpy: {pinned_numpy})"
    try:
        kernel = load_one()
    except NativeKernelUnavailable as error:
        return None, f"tile (numpy: {str(error).splitlines()[0]})"
    return kernel, kernel.name


@cache
def load(stem: str) -> ctypes.CDLL:
    """The library built from ``engine/kernels/<stem>.c``, from the cache or compiled now (once a
    process). NativeKernelUnavailable when it cannot be had here."""
    source = KERNELS / f"{stem}.c"
    if not source.is_file():
        raise NativeKernelUnavailable(f"the kernel source {source} is missing from the installation")
    cc = compiler()
    name = library_name(source, cc)
    folder = cache_folder()
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        library = folder / name
        if not _cached(library):
            _compile(cc, source, library)
        return _open(library)
    except OSError:  # the cache cannot be written: a private build, gone when the process ends
        with tempfile.TemporaryDirectory(prefix="verispec-kernel-") as scratch:
            library = Path(scratch) / name
            _compile(cc, source, library)
            return _open(library)  # mapped: the file may go
