"""The import contract: harmonia's layers, and a checker that fails on an upward import.

Layers, bottom to top (docs/architecture.md explains each). A module may import
any module of a lower layer and modules of its own block; it may never import a
higher layer, nor a sibling block of its own layer (render and parse are
siblings: neither knows the other). Every module under ``src/harmonia`` must
belong to a block, so a new subsystem is added with one line here.

Every import counts: top-level, inside functions (lazy imports) and under
``TYPE_CHECKING``, because each of them couples the two modules all the same.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"

#: The package root is the public facade: integrations and apps import the core
#: through it (``from harmonia import Message``), so it sits just above
#: ``_encoding``; the core below never imports it.
ROOT = "harmonia"

#: Bottom to top. Each layer maps block names to module prefixes; a prefix covers
#: the module of that name and everything below it. Blocks of one layer are siblings.
LAYERS: Sequence[Mapping[str, Sequence[str]]] = (
    {"base": ("harmonia._errors", "harmonia._names", "harmonia._enums", "harmonia._runtime")},
    {"files": ("harmonia._files", "harmonia._options")},
    {"tokenizer": ("harmonia._tokenizer",)},
    {
        "model": ("harmonia._builtin_tools", "harmonia._content", "harmonia._message"),
        "vocabulary": ("harmonia.vocabulary",),
    },
    {
        "render": ("harmonia._render",),
        "parse": ("harmonia._parse",),
    },
    {"turn": ("harmonia._turn",)},
    {"encoding": ("harmonia._encoding", ROOT)},
    {"openai_compat": ("harmonia.openai_compat",), "constrained": ("harmonia.constrained",)},
    # Apps. tools and engines are written together and may lean on each other.
    {"apps": ("harmonia.tools", "harmonia.engines")},
    {"agent": ("harmonia.agent",)},
    {"serve": ("harmonia.serve",), "training": ("harmonia.training",)},
    {"cli": ("harmonia._cli", "harmonia.__main__")},
)


def covers(prefix: str, module: str) -> bool:
    if prefix == ROOT:
        return module == ROOT
    return module == prefix or module.startswith(prefix + ".")


def place(module: str, layers: Sequence[Mapping[str, Sequence[str]]]) -> tuple[int, str] | None:
    """(layer index, block name) of ``module``; the longest matching prefix wins."""
    best: tuple[int, int, str] | None = None
    for index, layer in enumerate(layers):
        for block, prefixes in layer.items():
            for prefix in prefixes:
                if covers(prefix, module) and (best is None or len(prefix) > best[0]):
                    best = (len(prefix), index, block)
    return None if best is None else (best[1], best[2])


def imported_modules(module: str, is_package: bool, source: str, known: set[str]) -> list[str]:
    """The harmonia modules ``source`` imports (``from . import x`` resolves to ``pkg.x``
    when ``x`` is a module)."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - node.level + 1]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.append(candidate if candidate in known else base)
    return [name for name in found if name == ROOT or name.startswith(ROOT + ".")]


def violations(
    sources: Mapping[str, tuple[bool, str]],
    layers: Sequence[Mapping[str, Sequence[str]]] = LAYERS,
) -> list[str]:
    """Every broken rule in ``sources`` (module name -> (is package, source text))."""
    problems: list[str] = []
    known = set(sources)
    for module, (is_package, source) in sorted(sources.items()):
        here = place(module, layers)
        if here is None:
            problems.append(f"{module} belongs to no layer: add it to LAYERS")
            continue
        for target in imported_modules(module, is_package, source, known):
            there = place(target, layers)
            if there is None or there == here:
                continue  # an unplaced target is reported as a module of its own
            if there[0] > here[0]:
                problems.append(
                    f"{module} ({here[1]}) imports {target} ({there[1]}), a higher layer"
                )
            elif there[0] == here[0]:
                problems.append(
                    f"{module} ({here[1]}) imports {target} ({there[1]}), a sibling block"
                )
    return problems


def harmonia_sources() -> dict[str, tuple[bool, str]]:
    sources = {}
    for path in sorted((SRC / "harmonia").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        sources[".".join(parts)] = (is_package, path.read_text(encoding="utf-8"))
    return sources


def test_harmonia_keeps_its_import_contract() -> None:
    sources = harmonia_sources()
    assert "harmonia._tokenizer.tokenizer" in sources  # the walk found the tree
    assert violations(sources) == []


@pytest.mark.parametrize(
    ("importer", "source", "message"),
    [
        # The tokenizer reaching up into the renderer.
        ("harmonia._tokenizer.tokenizer", "from .._render import Renderer", "a higher layer"),
        # The core importing an integration, lazily.
        (
            "harmonia._encoding",
            "def f():\n    from .openai_compat import x",
            "a higher layer",
        ),
        # The data model importing the package root (the facade above it).
        ("harmonia._message", "from harmonia import Role", "a higher layer"),
        # Render and parse are siblings.
        ("harmonia._render.renderer", "from .._parse import parse_completion", "a sibling block"),
        # Integrations are siblings too.
        ("harmonia.constrained._mask", "import harmonia.openai_compat", "a sibling block"),
        # A type-only import counts.
        (
            "harmonia._errors",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._message import M",
            "a higher layer",
        ),
    ],
)
def test_checker_reports_a_forbidden_import(importer: str, source: str, message: str) -> None:
    sources = {
        name: (False, "")
        for name in (
            "harmonia._errors",
            "harmonia._message",
            "harmonia._encoding",
            "harmonia._parse.parser",
            "harmonia._render.renderer",
            "harmonia._tokenizer.tokenizer",
            "harmonia.openai_compat",
            "harmonia.constrained._mask",
        )
    }
    sources.update({"harmonia": (True, ""), "harmonia._render": (True, "")})
    sources[importer] = (False, source)
    found = violations(sources)
    assert len(found) == 1 and message in found[0] and found[0].startswith(importer), found


def test_checker_allows_downward_and_same_block_imports() -> None:
    sources = {
        "harmonia": (True, "from ._encoding import HarmonyEncoding"),
        "harmonia._encoding": (False, "from ._render import Renderer\nfrom ._parse import p"),
        "harmonia._parse.parser": (False, "from . import header\nfrom .._tokenizer import st"),
        "harmonia._parse.header": (False, "from .._message import Author"),
        "harmonia._message": (False, "from ._errors import InputError"),
        "harmonia._errors": (False, ""),
        "harmonia._render": (True, "from .renderer import Renderer"),
        "harmonia._render.renderer": (False, "from .cot import x\nfrom .._tokenizer import T"),
        "harmonia._render.cot": (False, ""),
        "harmonia._tokenizer": (True, "from .tokenizer import T"),
        "harmonia._tokenizer.tokenizer": (False, "from .._errors import E"),
        "harmonia.tools": (True, "from harmonia import Message"),
        "harmonia._cli.main": (False, "from ..openai_compat import x\nfrom ..tools import t"),
        "harmonia.openai_compat": (True, "from .._encoding import HarmonyEncoding"),
    }
    assert violations(sources) == []


def test_checker_reports_a_module_outside_every_layer() -> None:
    sources = {"harmonia.newthing": (True, ""), "harmonia._errors": (False, "")}
    assert violations(sources) == ["harmonia.newthing belongs to no layer: add it to LAYERS"]
