"""Output files and folders that appear whole or not at all.

Every command that writes a file or a folder writes it under a temporary name
beside its destination and renames it into place once it is complete, so an
interrupted or failed run (Ctrl-C, a full disk, a refused input) never leaves a
truncated page or an empty folder where the finished output should be. An
output that already exists is replaced only when the caller allows it (the
command line's ``--force``).
"""

from __future__ import annotations

import codecs
import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from ._errors import InputError


def describe(path: str | os.PathLike[str]) -> str:
    """A path as messages name it: ``-`` is standard input."""
    return "standard input" if str(path) == "-" else str(path)


def cannot_read(path: str | os.PathLike[str], exc: OSError) -> InputError:
    """The one wording of an input that cannot be read, in every command."""
    reason = exc.strerror or str(exc)
    if isinstance(exc, IsADirectoryError) or (exc.errno is None and Path(path).is_dir()):
        reason = "it is a folder; give a file"
    return InputError(f"cannot read {describe(path)}: {reason}")


def not_utf8(path: str | os.PathLike[str], exc: UnicodeDecodeError) -> str:
    """One line for a file that is not UTF-8: the first bad byte and its offset."""
    where = f"byte {exc.object[exc.start]:#04x}"
    offset = None if str(path) == "-" else _first_bad_byte(path)
    if offset is not None:
        where += f" at offset {offset}"
    return f"{describe(path)} is not UTF-8 text ({where}); give a UTF-8 text or JSON file"


def _first_bad_byte(path: str | os.PathLike[str]) -> int | None:
    """The file offset of the first byte that is not UTF-8 (the error's is per buffer)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 16):
                pending = len(decoder.getstate()[0])
                try:
                    decoder.decode(chunk)
                except UnicodeDecodeError as exc:
                    return offset - pending + exc.start
                offset += len(chunk)
    except OSError:
        return None
    return None


def read_text_file(path: str | os.PathLike[str]) -> str:
    """A UTF-8 text file's text; a missing, unreadable or binary file is an InputError."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError as exc:
        raise InputError(not_utf8(path, exc)) from None
    except OSError as exc:
        raise cannot_read(path, exc) from None


def parse_json(text: str, path: str | os.PathLike[str], fix: str = "") -> Any:
    """``text``, read from ``path``, as JSON; anything else is an InputError saying where."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"{exc.msg} at line {exc.lineno} column {exc.colno}"
        raise InputError(f"{describe(path)} is not JSON: {where}{fix}") from None


def check_output_file(path: str | os.PathLike[str], force: bool, *, also: str = "") -> None:
    """Refuse, before any work, a file output that exists (without ``force``) or cannot be
    written: its folder is missing, or the path is a folder."""
    target = Path(path)
    if target.is_dir():
        raise InputError(f"cannot write {target}: it is a folder; give a file name")
    refuse_existing(target, force, also=also)
    folder = target.parent
    if not folder.is_dir():
        raise InputError(
            f"cannot write {target}: the folder {folder} does not exist; create it first"
        )


def refuse_same(
    outputs: dict[str, str | os.PathLike[str] | None],
    inputs: dict[str, str | os.PathLike[str] | None],
) -> None:
    """Refuse an output (by its flag) that is an input, or a folder holding one.

    Paths are compared resolved (``./x`` and ``x``, links), so no command reads a
    file it is about to replace. ``-`` (standard input) is never a path.
    """
    seen: dict[Path, str] = {}
    for name, value in inputs.items():
        if value is not None and str(value) != "-":
            seen.setdefault(Path(value).resolve(), name)
    for flag, value in outputs.items():
        if value is None:
            continue
        target = Path(value).resolve()
        for source, name in seen.items():
            if source == target or target in source.parents:
                how = "the same path as" if source == target else "a folder holding"
                raise InputError(
                    f"{flag} {value} is {how} {name}: writing it would destroy what is "
                    "read; choose another name"
                )
        seen[target] = flag


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


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], *, encoding: str = "utf-8") -> Iterator[TextIO]:
    """A text file that becomes ``path`` when the block ends without an exception.

    On any exception (``KeyboardInterrupt`` too) the partial file is deleted and
    ``path`` is left as it was.
    """
    target = Path(path)
    temporary = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        handle = open(temporary, "w", encoding=encoding)  # noqa: SIM115
    except OSError as exc:  # named by the output, not by the temporary file beside it
        raise InputError(f"cannot write {target}: {exc.strerror or exc}") from None
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
    # mkdtemp makes it 0700; the finished folder gets the mode mkdir would give it
    # (as data build's), not one that hides it from the rest of a team.
    umask = os.umask(0)
    os.umask(umask)
    temporary.chmod(0o777 & ~umask)
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
