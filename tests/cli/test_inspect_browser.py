"""The ``inspect --html`` page in a real headless browser (Debian's chromium).

CI installs chromium (.ci/run); on a machine without it these tests are
skipped with the reason printed.
"""

from __future__ import annotations

import io
import shutil
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

import pytest

from harmonia._cli.main import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


def _chromium(*args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    profile = tempfile.mkdtemp()
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _png_pixels(data: bytes) -> tuple[int, int, list[tuple[int, int, int]]]:
    """Decode an 8-bit RGB/RGBA, non-interlaced PNG (what chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks, idat = 8, {}, b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IDAT":
            idat += body
        else:
            chunks[kind] = body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunks[b"IHDR"])
    assert depth == 8 and interlace == 0 and colour in (2, 6)
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    pixels = []
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 255
            elif ftype == 2:
                line[i] = (line[i] + b) & 255
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 255
        pixels += [tuple(line[x * bpp : x * bpp + 3]) for x in range(width)]  # type: ignore[misc]
        prev = line
    return width, height, pixels  # type: ignore[return-value]


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("inspect")
    completion = tmp / "c.txt"
    completion.write_text(
        "<|channel|>analysis<|message|>Think.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Four.<|return|>junk"
    )
    html = tmp / "page.html"
    assert (
        main(
            ["inspect", str(completion), "--role", "assistant", "--html", str(html)],
            stdout=io.StringIO(),
        )
        == 0
    )
    return html


def test_browser_parses_the_page(page: Path) -> None:
    result = _chromium("--dump-dom", page.as_uri())
    dom = result.stdout
    assert result.returncode == 0, result.stderr[-500:]
    assert dom.count('<section class="block') == 3
    assert "[1] assistant · channel final" in dom
    assert 'title="#0 id 200005"' in dom
    assert "junk-between-messages" in dom


def test_screenshot_shows_the_blocks(page: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    result = _chromium("--window-size=900,600", f"--screenshot={shot}", page.as_uri())
    assert shot.exists(), result.stderr[-500:]
    width, height, pixels = _png_pixels(shot.read_bytes())
    assert (width, height) == (900, 600)
    background = (250, 250, 250)
    drawn = sum(1 for p in pixels if p != background)
    assert drawn > 0.05 * len(pixels), "the page looks blank"
    # special tokens are drawn on the purple highlight, diagnostics on pink
    purple = sum(
        1 for r, g, b in pixels if abs(r - 0x5B) < 12 and abs(g - 0x2C) < 12 and abs(b - 0x83) < 12
    )
    pink = sum(1 for r, g, b in pixels if (r, g, b) == (0xFD, 0xEC, 0xEA))
    assert purple > 500 and pink > 500
