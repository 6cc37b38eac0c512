"""Output files and folders that appear whole or not at all.

Every command that writes a file or a folder writes it under a temporary name
beside its destination and renames it into place once it is complete, so an
interrupted or failed run (Ctrl-C, a full disk, a refused input) never leaves a
truncated page or an empty folder where the finished output should be. An
output that already exists is replaced only when the caller allows it (the
command line's ``--force``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from ._errors import InputError


def refuse_existing(path: str | os.PathLike[str], force: bool, *, also: str = "") -> None:
    """Raise :class:`InputError` if ``path`` exists and ``force`` is false.

    ``also`` is another way out to mention (``"--resume continues it"``).
    """
    target = Path(path)
    if force or not (target.exists() or target.is_symlink()):
        return
    kind = "folder" if target.is_dir() else "file"
    ways = "; ".join(w for w in (also, "--force replaces it") if w)
    raise InputError(f"{target} already exists ({kind}): {ways}, or choose another name")


def _temporary_name(target: Path) -> Path:
    return target.with_name(f".{target.name}.tmp-{os.getpid()}")


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], *, encoding: str = "utf-8") -> Iterator[TextIO]:
    """A text file that becomes ``path`` when the block ends without an exception.

    On any exception (``KeyboardInterrupt`` too) the partial file is deleted and
    ``path`` is left as it was.
    """
    target = Path(path)
    temporary = _temporary_name(target)
    handle = open(temporary, "w", encoding=encoding)  # noqa: SIM115
    try:
        with handle:
            yield handle
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """``Path.write_text``, but whole or not at all."""
    with atomic_file(path) as handle:
        handle.write(text)


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A fresh temporary folder that becomes ``path`` when the block ends without an exception.

    An existing ``path`` is replaced (check with :func:`refuse_existing` first);
    on an exception the temporary folder is removed and ``path`` left as it was.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield temporary
        if target.exists() or target.is_symlink():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
            os.replace(target, old / "x")
            os.replace(temporary, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(temporary, target)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
