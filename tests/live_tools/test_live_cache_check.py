"""tools/live/check_cache.py: a trimmed live-cache build fails where it is made.

The live suite's builds keep part of what they unpack. These tests build small trees of the
same shape (a converter that imports a package beside it, a gguf-py folder, a server binary)
and show the check names a trimmed one, both at build time (against the source) and on a
later cache hit (against the manifest the build wrote).
"""

from __future__ import annotations

import importlib.util
import shutil
import stat
import sys
from pathlib import Path
from types import ModuleType

import pytest

_TOOL = Path(__file__).resolve().parents[2] / "tools" / "live" / "check_cache.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_cache", _TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_cache"] = module
    spec.loader.exec_module(module)
    return module


check_cache = _load()


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _source(root: Path) -> Path:
    """A source tree shaped like llama.cpp's: converter, `conversion/`, gguf-py, an extra."""
    _write(
        root / "convert_hf_to_gguf.py",
        "import os\nimport torch\nimport gguf\nfrom conversion import ModelBase\n"
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import unused_local\n"
        "def main():\n    import lazy_local\n",
    )
    _write(root / "conversion" / "__init__.py", "from .base import ModelBase\n")
    _write(root / "conversion" / "base.py", "import gguf\nModelBase = object\n")
    # Found by name at run time (importlib), never in an import statement.
    _write(root / "conversion" / "gpt_oss.py", "from .base import ModelBase\n")
    _write(root / "gguf-py" / "gguf" / "__init__.py", "from .constants import *\n")
    _write(root / "gguf-py" / "gguf" / "constants.py", "X = 1\n")
    _write(root / "unused_local.py", "")
    _write(root / "lazy_local.py", "")
    return root


def _dest(root: Path, source: Path, *, keep: tuple[str, ...]) -> Path:
    binary = root / "bin" / "llama-server"
    _write(binary, "#!/bin/sh\necho version: 1\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    (root / "src").mkdir()
    for name in ("convert_hf_to_gguf.py", *keep):
        if (source / name).is_dir():
            shutil.copytree(source / name, root / "src" / name)
        else:
            shutil.copy(source / name, root / "src" / name)
    return root


def test_the_closure_follows_module_level_imports_and_keeps_packages_whole(
    tmp_path: Path,
) -> None:
    found = check_cache.local_closure(_source(tmp_path))
    assert {"conversion", "conversion.base", "conversion.gpt_oss", "gguf"} <= set(found)
    assert "gguf.constants" in found  # a relative import inside gguf-py
    # Lazy and type-checking imports do not stop the converter from loading.
    assert "lazy_local" not in found and "unused_local" not in found


def test_a_build_that_left_out_the_conversion_package_fails_at_build_time(
    tmp_path: Path,
) -> None:
    source = _source(tmp_path / "unpacked")
    dest = _dest(tmp_path / "dest", source, keep=("gguf-py",))
    problems = check_cache.check_llamacpp(dest, source)
    assert any("conversion/__init__.py" in p for p in problems), problems
    assert any("conversion/gpt_oss.py" in p for p in problems), problems


def test_a_complete_build_passes_and_its_manifest_checks_later_cache_hits(
    tmp_path: Path,
) -> None:
    source = _source(tmp_path / "unpacked")
    dest = _dest(tmp_path / "dest", source, keep=("conversion", "gguf-py"))
    assert check_cache.check_llamacpp(dest, source) == []
    shutil.rmtree(source)
    assert check_cache.check_llamacpp(dest, None) == []
    (dest / "src" / "conversion" / "gpt_oss.py").unlink()
    assert check_cache.check_llamacpp(dest, None) == [
        "the converter imports conversion/gpt_oss.py, which the build did not keep in "
        f"{dest / 'src'}"
    ]


def test_a_cache_from_an_older_build_has_no_manifest_and_is_built_again(
    tmp_path: Path,
) -> None:
    source = _source(tmp_path / "unpacked")
    dest = _dest(tmp_path / "dest", source, keep=("conversion", "gguf-py"))
    problems = check_cache.check_llamacpp(dest, None)
    assert len(problems) == 1 and "made by an older build" in problems[0]


def test_a_server_binary_that_does_not_run_fails(tmp_path: Path) -> None:
    source = _source(tmp_path / "unpacked")
    dest = _dest(tmp_path / "dest", source, keep=("conversion", "gguf-py"))
    _write(dest / "bin" / "llama-server", "#!/bin/sh\nexit 3\n")
    problems = check_cache.check_llamacpp(dest, source)
    assert len(problems) == 1 and "exited 3" in problems[0]


@pytest.mark.parametrize("launcher", ["#!/bin/sh\nexit 0\n", None])
def test_the_vllm_build_needs_its_launcher_and_completion_mark(
    tmp_path: Path, launcher: str | None
) -> None:
    if launcher is not None:
        _write(tmp_path / "bin" / "harmonia-vllm", launcher)
        (tmp_path / "bin" / "harmonia-vllm").chmod(0o755)
    assert check_cache.check_vllm(tmp_path) != []
    (tmp_path / ".complete").touch()
    assert (check_cache.check_vllm(tmp_path) == []) is (launcher is not None)
