"""The kernel's entry point: output guards, then ipykernel.

Usage: ``python _kernel_main.py SETTINGS_JSON KERNEL_ARGS...``.

Run as a script inside the sandbox (never imported by harmonia), so it may use
the standard library and what the kernel itself imports. Its job is to keep
what a cell prints from growing without bound *where it is produced*: a
``print`` of a gigabyte must not make the kernel's own serializer fail (the
model would read a tornado ``MemoryError`` and never learn its output was
lost), and no message the kernel sends may be so large that the host refuses it.

Per cell (one ``execute_request``):

* text written to ``stdout``/``stderr`` passes until ``budget`` characters have
  gone out; after that only the last ``budget`` characters are kept (in memory,
  never more) and sent when the cell ends. How many characters were dropped in
  between is sent as a ``display_data`` of type :data:`OMITTED_MIME`;
* any other message (``display_data``, ``execute_result``, ``error``, and the
  ``execute_reply`` that repeats an error on the shell channel) has each
  text value cut to ``budget`` characters (counted the same way) and each image
  larger than ``max_image_bytes`` replaced by a :data:`DROPPED_MIME` note.

The code in the kernel can undo all of this; that only hurts its own output,
because the host bounds what it accepts independently (message size, text
budget, image size and count).
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import threading
from collections import deque
from typing import Any

OMITTED_MIME = "application/vnd.harmonia.omitted+json"
DROPPED_MIME = "application/vnd.harmonia.dropped-image+json"
_IMAGE_MIMES = ("image/png", "image/jpeg", "image/gif", "image/svg+xml")


class _Budget:
    """Head and tail of one cell's stream text; counts what falls between."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.lock = threading.RLock()
        self.reset()

    def reset(self) -> None:
        self.passed = 0
        self.tail: deque[list[Any]] = deque()
        self.tail_len = 0
        self.omitted = 0

    def take(self, stream: Any, text: str) -> str:
        """The part of ``text`` to write now; keeps a tail of the rest."""
        with self.lock:
            n = len(text)
            room = self.budget - self.passed
            if room >= n:
                self.passed += n
                return text
            head = text[:room] if room > 0 else ""
            self.passed += len(head)
            start = max(len(head), n - self.budget)
            self.omitted += start - len(head)
            piece = text[start:]
            if piece:
                self.tail.append([stream, piece])
                self.tail_len += len(piece)
            while self.tail_len > self.budget:
                first = self.tail[0]
                extra = self.tail_len - self.budget
                if len(first[1]) <= extra:
                    self.tail.popleft()
                    self.tail_len -= len(first[1])
                    self.omitted += len(first[1])
                else:
                    first[1] = first[1][extra:]
                    self.tail_len -= extra
                    self.omitted += extra
            return head

    def cut_text(self, value: str) -> str:
        with self.lock:
            if len(value) <= self.budget:
                return value
            self.omitted += len(value) - self.budget
            half = self.budget // 2
            return value[: self.budget - half] + value[len(value) - half :]

    def end(self) -> tuple[list[list[Any]], int]:
        with self.lock:
            tail, omitted = list(self.tail), self.omitted
            self.reset()
            return tail, omitted


def _cap_content(kind: str, content: Any, budget: _Budget, max_image_bytes: int) -> Any:
    if not isinstance(content, dict):
        return content
    if kind in ("display_data", "execute_result", "update_display_data"):
        data = content.get("data")
        if isinstance(data, dict):
            capped = {}
            for mime, value in data.items():
                if mime in _IMAGE_MIMES and isinstance(value, str):
                    size = len(value) if mime == "image/svg+xml" else len(value) * 3 // 4
                    if size > max_image_bytes:
                        capped[DROPPED_MIME] = {"mime": mime, "bytes": size}
                        continue
                elif isinstance(value, str):
                    value = budget.cut_text(value)
                capped[mime] = value
            content = dict(content, data=capped)
    elif kind in ("error", "execute_reply"):
        lines = content.get("traceback")
        if isinstance(lines, list):
            joined = "\n".join(str(line) for line in lines)
            if len(joined) > budget.budget:
                content = dict(content, traceback=[budget.cut_text(joined)])
        for key in ("evalue", "ename"):
            value = content.get(key)
            if isinstance(value, str) and len(value) > budget.budget:
                content = dict(content, **{key: budget.cut_text(value)})
    return content


def install(budget_chars: int, max_image_bytes: int) -> None:
    from ipykernel import iostream, ipkernel
    from jupyter_client import session

    budget = _Budget(budget_chars)
    original_write = iostream.OutStream.write
    original_send = session.Session.send
    original_do_execute = ipkernel.IPythonKernel.do_execute

    def write(self: Any, string: Any) -> int | None:
        if not isinstance(string, str):
            return original_write(self, string)  # raises the usual TypeError
        now = budget.take(self, string)
        if now:
            original_write(self, now)
        return len(string)

    def send(
        self: Any, stream: Any, msg_or_type: Any, content: Any = None, *a: Any, **k: Any
    ) -> Any:
        if isinstance(msg_or_type, dict):
            kind = msg_or_type.get("header", {}).get("msg_type", "")
            capped = _cap_content(kind, msg_or_type.get("content"), budget, max_image_bytes)
            if capped is not msg_or_type.get("content"):
                msg_or_type = dict(msg_or_type, content=capped)
        else:
            content = _cap_content(str(msg_or_type), content, budget, max_image_bytes)
        return original_send(self, stream, msg_or_type, content, *a, **k)

    async def do_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        budget.end()
        try:
            return await original_do_execute(self, *args, **kwargs)  # type: ignore[no-untyped-call]
        finally:
            tail, omitted = budget.end()
            for stream, text in tail:
                original_write(stream, text)
            if omitted:
                for stream in (sys.stdout, sys.stderr):
                    flush = getattr(stream, "flush", None)
                    if flush is not None:
                        flush()
                self.session.send(
                    self.iopub_socket,
                    "display_data",
                    {"data": {OMITTED_MIME: {"chars": omitted}}, "metadata": {}, "transient": {}},
                    parent=self.get_parent("shell"),
                    ident=self._topic("display_data"),
                )

    iostream.OutStream.write = write  # type: ignore[method-assign]
    session.Session.send = send  # type: ignore[method-assign]
    ipkernel.IPythonKernel.do_execute = do_execute  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    settings = json.loads(argv[1])
    install(int(settings["budget"]), int(settings["max_image_bytes"]))
    # As ``python -m ipykernel_launcher`` would: the working directory first on the path.
    sys.argv = ["ipykernel_launcher", *argv[2:]]
    sys.path[0] = os.getcwd()
    runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv)
