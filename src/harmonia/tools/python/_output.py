"""Turning a cell's Jupyter messages into the text the model reads.

Streams, tracebacks and results are kept in the order they arrived, ANSI
escape sequences removed, images written to the data directory and named by
path, and the whole bounded: past the budget only the head and the tail are
kept, around a marker that says how much was cut. The buffer never holds more
than the budget, so a 10 MB print costs no more memory than a short one.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any

from ._session import create_file, unpredictable_name

# What the kernel's own guard (``_kernel_main.py``) sends; kept in step by hand
# because that file runs inside the sandbox and imports nothing of harmonia.
OMITTED_MIME = "application/vnd.harmonia.omitted+json"
DROPPED_MIME = "application/vnd.harmonia.dropped-image+json"
_MIB = 1024 * 1024

# The warning gpt-oss's own python tool returns for a silent cell: the model has seen it.
NO_OUTPUT = (
    "[WARN] No output available. Use print() to output anything to stdout to receive the output"
)

# CSI (colours, cursor moves), OSC (titles, links; ended by BEL or ST), then
# any other escape: intermediates and a final byte (charset selection "ESC ( B",
# "ESC 7", ...).
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[ -/]*[0-~]")

_IMAGE_TYPES = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/svg+xml": "svg"}


def strip_ansi(text: str) -> str:
    r"""Remove terminal escape sequences.

    >>> strip_ansi("\x1b[31mZeroDivisionError\x1b[0m: division by zero")
    'ZeroDivisionError: division by zero'
    """
    return _ANSI.sub("", text)


class OutputBuffer:
    """Text appended in pieces, of which at most ``budget`` characters are kept.

    >>> buf = OutputBuffer(budget=20)
    >>> buf.append("0123456789" * 5)
    >>> print(buf.text())
    0123456789
    [... 30 characters omitted ...]
    0123456789
    """

    def __init__(self, budget: int) -> None:
        self._head_budget = budget - budget // 2
        self._tail_budget = budget // 2
        self._head = ""
        self._tail = ""
        self._omitted = 0
        self._elsewhere = 0

    def omitted_elsewhere(self, chars: int) -> None:
        """Count characters cut before they reached this buffer (by the kernel's guard)."""
        self._elsewhere += max(0, chars)

    def append(self, text: str) -> None:
        room = self._head_budget - len(self._head)
        if room > 0:
            self._head += text[:room]
            text = text[room:]
        if not text:
            return
        tail = self._tail + text
        if len(tail) > self._tail_budget:
            cut = len(tail) - self._tail_budget
            self._omitted += cut
            tail = tail[cut:]
        self._tail = tail

    def text(self) -> str:
        omitted = self.truncated
        if not omitted:
            return self._head + self._tail
        head = self._head if self._head.endswith("\n") else self._head + "\n"
        marker = f"[... {omitted} characters omitted ...]\n"
        return head + marker + self._tail

    @property
    def truncated(self) -> int:
        """How many characters were cut, here and by the kernel's guard."""
        return self._omitted + self._elsewhere


class CellOutput:
    """Collects one execution's iopub messages; images go to the data directory.

    ``data_fd`` is an open descriptor of the data directory on the host (the
    sandbox can write there, so every image is created relative to it, under a
    name the code cannot guess, never over an existing file or through a link)
    and ``shown_dir`` the same directory as the code sees it (``/mnt/data`` in
    the sandbox), which is the path the model is told.
    """

    def __init__(
        self,
        budget: int,
        data_fd: int | None,
        shown_dir: str,
        image_prefix: str,
        owner: tuple[int, int] | None = None,
        *,
        max_image_bytes: int = 16 * _MIB,
        max_images: int = 16,
    ) -> None:
        self.buffer = OutputBuffer(budget)
        self.images: list[str] = []
        self.images_refused = 0
        self.error: str | None = None
        self._data_fd = data_fd
        self._shown_dir = shown_dir
        self._image_prefix = image_prefix
        self._owner = owner
        self._max_image_bytes = max_image_bytes
        self._max_images = max_images

    def add(self, msg_type: str, content: Mapping[str, Any]) -> None:
        if msg_type == "stream":
            self._append(str(content.get("text", "")))
        elif msg_type == "error":
            self.error = f"{content.get('ename', '')}: {content.get('evalue', '')}"[:2000]
            lines = content.get("traceback") or [self.error]
            self._append("\n".join(str(line) for line in lines) + "\n")
        elif msg_type in ("execute_result", "display_data"):
            self._display(content.get("data") or {})

    def _append(self, text: str) -> None:
        if text:
            self.buffer.append(strip_ansi(text))

    def _display(self, data: Mapping[str, Any]) -> None:
        omitted = data.get(OMITTED_MIME)
        if isinstance(omitted, Mapping) and isinstance(omitted.get("chars"), int):
            self.buffer.omitted_elsewhere(omitted["chars"])
            return
        dropped = data.get(DROPPED_MIME)
        if isinstance(dropped, Mapping) and isinstance(dropped.get("bytes"), int):
            self._refuse_size(dropped["bytes"])
            return
        for mime, ext in _IMAGE_TYPES.items():
            if mime in data:
                shown = self._save_image(data[mime], mime, ext)
                if shown == "":
                    return  # refused, and the reply says why
                if shown is not None:
                    # The text/plain of a figure ("<Figure size 640x480 ...>") says
                    # nothing the path does not; the path is what the model can use.
                    self._append(f"[image saved to {shown}]\n")
                    return
        text = data.get("text/plain")
        if text:
            self._append(str(text).rstrip("\n") + "\n")

    def _refuse(self, why: str) -> None:
        self.images_refused += 1
        self._append(f"[image not saved: {why}]\n")

    def _refuse_size(self, size: int) -> None:
        limit = self._max_image_bytes / _MIB
        self._refuse(f"{size / _MIB:.1f} MiB is over the limit of {limit:.1f} MiB per image")

    def _save_image(self, payload: Any, mime: str, ext: str) -> str | None:
        if self._data_fd is None or not isinstance(payload, str):
            return None
        if len(self.images) >= self._max_images:
            self._refuse(f"a call may save at most {self._max_images} images")
            return ""
        # Checked before decoding: base64 is 4/3 of the bytes.
        size = len(payload) if mime == "image/svg+xml" else len(payload) * 3 // 4
        if size > self._max_image_bytes:
            self._refuse_size(size)
            return ""
        try:
            raw = payload.encode() if mime == "image/svg+xml" else base64.b64decode(payload)
        except (binascii.Error, ValueError, UnicodeEncodeError):
            return None
        name = unpredictable_name(self._image_prefix, ext)
        try:
            create_file(self._data_fd, name, raw, self._owner)
        except OSError as exc:
            self._refuse(f"the data drive refused it ({exc.strerror or exc})")
            return ""
        self.images.append(name)
        return f"{self._shown_dir.rstrip('/')}/{name}"

    def text(self) -> str:
        out = self.buffer.text()
        return out if out.strip() else ""
