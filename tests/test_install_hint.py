"""Every install hint is a command that works from where the user is.

harmonia is not on the package index: ``pip install 'harmonia[serve]'`` answers
"No matching distribution". ``harmonia._errors.install_hint`` builds each hint
from how this harmonia was installed, and no error or doc spells the index form.
"""

from __future__ import annotations

import json
import re
import shlex
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from harmonia import _errors
from harmonia._errors import _install_hint, install_hint

ROOT = Path(__file__).resolve().parent.parent


class _FakeDist:
    def __init__(self, direct_url: dict[str, Any] | None, requires: list[str]) -> None:
        self._direct_url = direct_url
        self.requires = requires

    def read_text(self, name: str) -> str | None:
        if name == "direct_url.json" and self._direct_url is not None:
            return json.dumps(self._direct_url)
        return None


def test_from_a_checkout_the_hint_installs_the_checkout_editable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    hint = _install_hint("serve", str(ROOT / "src" / "harmonia" / "_errors.py"))
    assert shlex.split(hint) == ["pip", "install", "-e", f"{ROOT}[serve]"]
    monkeypatch.chdir(ROOT)  # in the checkout itself, the short form
    assert _install_hint("serve", str(ROOT / "src" / "harmonia" / "_errors.py")) == (
        "pip install -e '.[serve]'"
    )


def test_a_path_with_spaces_is_quoted(tmp_path: Path) -> None:
    checkout = tmp_path / "my projects" / "harmonia"
    (checkout / "src" / "harmonia").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("[project]\nname='harmonia'\n")
    hint = _install_hint("python", str(checkout / "src" / "harmonia" / "_errors.py"))
    assert shlex.split(hint) == ["pip", "install", "-e", f"{checkout}[python]"]


def test_from_a_wheel_the_hint_names_the_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheel = tmp_path / "dist" / "harmonia-0.1.0-py3-none-any.whl"
    fake = _FakeDist({"url": wheel.as_uri(), "archive_info": {}}, [])
    monkeypatch.setattr(metadata, "distribution", lambda name: fake)
    site = tmp_path / "site-packages" / "harmonia" / "_errors.py"
    hint = _install_hint("serve", str(site))
    assert shlex.split(hint) == ["pip", "install", f"{wheel}[serve]"]


def test_installed_some_other_way_the_hint_lists_the_extras_requirements(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    requires = [
        "quicktok-v1>=1",
        'fastapi>=0.115; extra == "serve"',
        "uvicorn[standard]>=0.30; extra == 'serve'",
        'redis>=5; extra == "serve-redis"',
    ]
    monkeypatch.setattr(metadata, "distribution", lambda name: _FakeDist(None, requires))
    hint = _install_hint("serve", str(tmp_path / "site-packages" / "harmonia" / "_errors.py"))
    assert shlex.split(hint) == ["pip", "install", "fastapi>=0.115", "uvicorn[standard]>=0.30"]


def test_the_hint_is_worked_out_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_errors, "_HINTS", {"serve": "cached"})
    assert install_hint("serve") == "cached"


def test_errors_and_docs_never_give_the_index_command() -> None:
    # ``pip install 'harmonia[x]'`` (or without quotes) cannot install this project.
    index_form = re.compile(r"pip install ['\"]?harmonia\[")
    offenders = []
    for path in [*(ROOT / "src").rglob("*.py"), ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if index_form.search(line) and "is not on the package index" not in line:
                offenders.append(f"{path.relative_to(ROOT)}:{number}")
    assert offenders == []


def test_a_missing_extra_names_the_working_command(monkeypatch: pytest.MonkeyPatch) -> None:
    # One real error end to end: jsonschema "missing" gives the checkout's command.
    import builtins

    from harmonia import InputError
    from harmonia.tools import _arguments

    real_import = builtins.__import__

    def no_jsonschema(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "jsonschema":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_jsonschema)
    with pytest.raises(InputError) as caught:
        _arguments._validator({"type": "object", "properties": {"q": {"type": "string"}}})
    assert install_hint("tools") in str(caught.value)
    assert "pip install -e" in str(caught.value)
