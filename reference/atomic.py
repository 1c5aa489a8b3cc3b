"""All-or-nothing outputs, the project's one atomic writer: a file or a set of files is built beside
the target, then renamed into place (reference/ holds it so the reference's own artifacts, the
calibration and the suffix cache, use it too; verispec/atomic.py re-exports it for the CLI).

    with replace_file(Path("out.npz")) as fh:
        fh.write(...)                               # the old bytes or the new ones, never a part

    with replace_directory(Path("vectors"), force=False) as staging:
        (staging / "a.jsonl").write_bytes(...)      # any number of files
    # here "vectors" holds the whole new set; on an exception (Ctrl-C included) nothing changed

What a reader of the target can see is the old set or the new set, never a mix or a part: the new
set is written into a hidden staging folder in the same parent (same file system, so the final
``os.rename`` is atomic) and renamed onto the target. A target that exists must be an empty
folder, or ``force`` must be given; then the old set is renamed away (hidden), the new one renamed
in, and the old one deleted -- between those two renames the target name is briefly absent, but
its content is never partial, and a failed second rename puts the old set back. A process killed
outright (SIGKILL, power loss) can leave a hidden ``.NAME.tmp-*`` or ``.NAME.old-*`` folder
beside the target, never a partial target.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from typing import BinaryIO
from contextlib import contextmanager
from pathlib import Path

from verispec.reference.errors import OutputError


def check_target(target: Path, *, force: bool) -> None:
    """OutputError unless ``target`` can become the output folder (checked before any work)."""
    if target.exists() or target.is_symlink():
        if not target.is_dir() or target.is_symlink():
            raise OutputError(f"{target} exists and is not a folder")
        if any(target.iterdir()) and not force:
            raise OutputError(f"{target} is not empty (use --force to replace its contents)")
    parent = target.parent
    if not parent.is_dir():
        raise OutputError(f"cannot write {target}: the folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {target}: the folder {parent} is not writable")


@contextmanager
def replace_directory(target: Path, *, force: bool) -> Iterator[Path]:
    """Yield an empty staging folder; when the block ends normally, it becomes ``target``.

    OutputError (before the block runs) for a target that cannot be replaced; on any exception in
    the block the staging folder is deleted and ``target`` is untouched (an OSError from the block
    comes out as OutputError, every other exception as it was).
    """
    check_target(target, force=force)
    # The staging name is chosen BEFORE the folder exists, so a Ctrl-C at any instant after the
    # mkdir (even before it returns) finds a known path to delete: with mkdtemp, an interrupt
    # between its mkdir and the try below left the folder behind.
    staging = target.parent / f".{target.name}.tmp-{secrets.token_hex(8)}"
    created = False  # an OSError from mkdir itself (a name clash) must not delete that folder
    try:
        staging.mkdir()  # mode 0777 & ~umask: what a plain mkdir of the target would make
        created = True
        yield staging
        _sync(staging)
        _swap_in(staging, target, force=force)
    except OSError as exc:  # disk full, permissions: one line, and the target as it was
        if created:
            shutil.rmtree(staging, ignore_errors=True)
        raise OutputError(f"cannot write {target}: {exc.strerror or exc}") from None
    except BaseException:  # Ctrl-C included (even inside the mkdir: the name is ours alone)
        shutil.rmtree(staging, ignore_errors=True)
        raise


@contextmanager
def replace_file(target: Path) -> Iterator[BinaryIO]:
    """Yield a binary file handle; when the block ends normally, its bytes become ``target``.

    Written to a hidden temporary file beside ``target`` and renamed onto it: ``target`` holds the
    old bytes or the new ones, never a part (on any exception the temporary file is deleted).
    """
    if target.is_dir():
        raise OutputError(f"{target} is a folder, not a file")
    if not target.parent.is_dir():
        raise OutputError(f"cannot write {target}: the folder {target.parent} does not exist")
    # as in replace_directory: the name is known before the file exists (a Ctrl-C right after
    # mkstemp's open would have left the file behind)
    name = target.parent / f".{target.name}.tmp-{secrets.token_hex(8)}"
    created = False
    try:
        # O_EXCL: a fresh file of ours; mode 0666 & ~umask, what open() would have made
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        created = True
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(name, target)
    except OSError as exc:
        if created:
            name.unlink(missing_ok=True)
        raise OutputError(f"cannot write {target}: {exc.strerror or exc}") from None
    except BaseException:
        name.unlink(missing_ok=True)
        raise


def _swap_in(staging: Path, target: Path, *, force: bool) -> None:
    check_target(target, force=force)  # again: the block may have run for minutes
    try:
        if not target.exists() or not any(target.iterdir()):
            os.replace(staging, target)  # rename(2) replaces an empty folder atomically
        else:
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
            os.replace(target, old)  # the old set, whole, out of the way
            try:
                os.replace(staging, target)
            except BaseException:
                os.replace(old, target)  # put the old set back
                raise
            shutil.rmtree(old, ignore_errors=True)
    except OSError as exc:
        raise OutputError(f"cannot write {target}: {exc.strerror or exc}") from None
    _fsync_dir(target.parent)


def _sync(folder: Path) -> None:
    """Flush every file of ``folder`` to disk, so the renamed set survives a crash whole."""
    for path in folder.iterdir():
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
    _fsync_dir(folder)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return  # some file systems cannot open a folder; the rename is still atomic
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
