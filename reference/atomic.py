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

Every output FILE the CLI writes goes through :func:`output_file` (checked before a run, and again
by :func:`replace_file` just before its rename): the path must be absent or a regular file. A FIFO,
a device node (``/dev/null``), a socket or a folder is refused with an OutputError naming it and is
never opened, never replaced; a symbolic link is refused too unless the caller asks to follow it
(``follow_symlinks=True``, or ``VERISPEC_FOLLOW_SYMLINKS=1`` in the environment for the CLI): then
the file it points to is replaced (it must itself be absent or regular) and the link stays a link.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from verispec.reference.errors import OutputError


def check_target(target: Path, *, force: bool) -> None:
    """OutputError unless ``target`` can become the output folder (checked before any work).

    The current folder (``.``) or one that holds it is refused: replacing it would swap the folder
    out from under the shell (and ``.`` has no name to stage a sibling beside)."""
    if _holds_current_folder(target):
        raise OutputError(
            f"{target} is the current folder or holds it: give a folder outside it (e.g. ../{Path.cwd().name}-out)"
        )
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


FOLLOW_SYMLINKS_ENV = "VERISPEC_FOLLOW_SYMLINKS"  # "1": an output path that is a symlink writes its target


def output_file(target: Path, *, follow_symlinks: bool | None = None) -> Path:
    """The regular file to write for ``target``: ``target`` itself, or with ``follow_symlinks``
    (default: ``VERISPEC_FOLLOW_SYMLINKS=1``) the file a symlink points to. OutputError naming the
    path when it exists and is not a regular file, or its folder is missing or not writable.

    Only ``lstat`` looks at the path: nothing is opened, so a FIFO never blocks and a device is
    never touched."""
    if follow_symlinks is None:
        follow_symlinks = os.environ.get(FOLLOW_SYMLINKS_ENV, "") == "1"
    mode = _lstat_mode(target)
    path = Path(target)
    if mode is not None and stat.S_ISLNK(mode):
        if not follow_symlinks:
            raise OutputError(
                f"{target} is a symbolic link: an output replaces only a regular file "
                f"(set {FOLLOW_SYMLINKS_ENV}=1 to write the file it points to)"
            )
        path = Path(os.path.realpath(target))
        mode = _lstat_mode(path)
    if mode is not None and stat.S_ISDIR(mode):
        raise OutputError(f"{target} is a folder, not a file")
    if mode is not None and not stat.S_ISREG(mode):
        raise OutputError(
            f"{target} is {_kind(mode)}, not a regular file: an output never replaces one (give a file path)"
        )
    if not path.parent.is_dir():
        raise OutputError(f"cannot write {target}: the folder {path.parent} does not exist")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {target}: the folder {path.parent} is not writable")
    return path


def _lstat_mode(path: Path) -> int | None:
    """The mode of ``path`` itself (a link's own), None when nothing is there."""
    try:
        return os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:  # a too-long name, a folder in the path that is a file...
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None


def _kind(mode: int) -> str:
    kinds = (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link loop"),
    )
    return next((name for test, name in kinds if test(mode)), "not a file")


def _holds_current_folder(target: Path) -> bool:
    """``target`` names the working folder or an ancestor of it (lexically: ``.``, ``..``, ``a/..``)."""
    absolute = Path(os.path.abspath(target))
    cwd = Path(os.path.abspath(os.getcwd()))
    return absolute == cwd or absolute in cwd.parents


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
def replace_file(target: Path, *, follow_symlinks: bool | None = None) -> Iterator[BinaryIO]:
    """Yield a binary file handle; when the block ends normally, its bytes become ``target``.

    Written to a hidden temporary file beside ``target`` and renamed onto it: ``target`` holds the
    old bytes or the new ones, never a part (on any exception the temporary file is deleted).
    ``target`` must pass :func:`output_file` before the block and again before the rename.
    """
    path = output_file(target, follow_symlinks=follow_symlinks)
    # as in replace_directory: the name is known before the file exists (a Ctrl-C right after
    # mkstemp's open would have left the file behind)
    name = path.parent / f".{path.name}.tmp-{secrets.token_hex(8)}"
    created = False
    try:
        # O_EXCL: a fresh file of ours; mode 0666 & ~umask, what open() would have made
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        created = True
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        if output_file(target, follow_symlinks=follow_symlinks) != path:  # again: the block may have run for minutes
            raise OutputError(f"{target} changed while it was being written (it now points elsewhere)")
        os.replace(name, path)
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
