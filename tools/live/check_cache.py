"""Check that a live-cache build holds what the live suite later imports or runs.

The builds in ``tools/live`` keep only part of what they unpack. Once, the llama.cpp build
kept ``convert_hf_to_gguf.py`` but not the ``conversion/`` package it imports; a cache made
before that trim hid the mistake on every warm machine, and a cold one failed half an hour
later, at model time. So each build ends with this check, and a cache that fails it is built
again rather than trusted:

    python tools/live/check_cache.py llamacpp DEST [--source SRC]
    python tools/live/check_cache.py vllm DEST

``llamacpp``: ``DEST/bin/llama-server`` runs (``--version``), and every module the GGUF
converter imports at module level, followed through the modules it reaches, is in
``DEST/src`` (or its ``gguf-py``). With ``--source`` (the unpacked tree, at build time) a
module found there but not kept is named; without it, the kept tree is read alone and an
import is local when the manifest the build wrote lists it. ``vllm``: the launcher runs
(``--version``). Exit 0 when complete; 1 with one line per missing piece otherwise.

Only the standard library is used: the build runs it with the system Python, before the
project's virtualenv has torch.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

CONVERTER = "convert_hf_to_gguf.py"
#: Where the kept source tree lists the local modules the converter reached at build time.
MANIFEST = ".converter-modules"


def module_level_imports(path: Path) -> set[tuple[str, int]]:
    """(module name, relative level) of each import that runs when ``path`` is imported.

    Imports inside functions, ``if TYPE_CHECKING`` blocks and ``try`` bodies are left out:
    they are optional or lazy, so a missing one does not stop the converter from loading.
    """
    found: set[tuple[str, int]] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.update((alias.name, 0) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                found.add((base, node.level))
                # `from . import x` and `from pkg import sub` may name submodules.
                found.update(
                    (f"{base}.{alias.name}" if base else alias.name, node.level)
                    for alias in node.names
                )
            elif isinstance(node, ast.If) and not _is_type_checking(node.test):
                visit(node.body)
                visit(node.orelse)

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def _roots(tree: Path) -> list[Path]:
    # The converter puts gguf-py on sys.path ahead of site-packages.
    return [tree, tree / "gguf-py"]


def _locate(name: str, roots: list[Path]) -> Path | None:
    """The file of module ``name`` under one of ``roots``, or None."""
    parts = name.split(".")
    for root in roots:
        base = root.joinpath(*parts)
        if (base / "__init__.py").is_file():
            return base / "__init__.py"
        if base.with_suffix(".py").is_file():
            return base.with_suffix(".py")
    return None


def _absolute(name: str, level: int, importer: Path, roots: list[Path]) -> str:
    if level == 0:
        return name
    # The deepest root holding the importer is its package's root (gguf-py sits in tree).
    for root in sorted(roots, key=lambda r: len(r.parts), reverse=True):
        if root in importer.parents:
            package = list(importer.relative_to(root).parts[:-1])
            package = package[: len(package) - (level - 1)]
            return ".".join([*package, name] if name else package)
    return name


def local_closure(tree: Path) -> dict[str, Path]:
    """Every module under ``tree`` that importing the converter loads, by dotted name.

    A package reached counts whole, each of its files: ``conversion`` finds the class for a
    model's architecture by importing its submodule by name, which no import statement shows.
    """
    roots = _roots(tree)
    seen: dict[str, Path] = {}
    todo = [tree / CONVERTER]
    while todo:
        path = todo.pop()
        for name, level in module_level_imports(path):
            full = _absolute(name, level, path, roots)
            parts = full.split(".")
            # A package's parents load first.
            for depth in range(1, len(parts) + 1):
                dotted = ".".join(parts[:depth])
                if dotted in seen:
                    continue
                found = _locate(dotted, roots)
                if found is not None:
                    seen[dotted] = found
                    todo.append(found)
                    if found.name == "__init__.py":
                        top = found.parent.parent
                        for inner in sorted(found.parent.rglob("*.py")):
                            key = ".".join(inner.relative_to(top).with_suffix("").parts)
                            if key not in seen:
                                seen[key] = inner
                                todo.append(inner)
    return seen


def _relative(path: Path, tree: Path) -> str:
    return path.relative_to(tree).as_posix()


def check_llamacpp(dest: Path, source: Path | None) -> list[str]:
    problems: list[str] = []
    binary = dest / "bin" / "llama-server"
    if not binary.is_file():
        problems.append(f"{binary} is missing")
    else:
        ran = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=60, check=False
        )
        if ran.returncode != 0:
            problems.append(f"{binary} --version exited {ran.returncode}: {ran.stderr[-300:]}")
    kept = dest / "src"
    if not (kept / CONVERTER).is_file():
        return [*problems, f"{kept / CONVERTER} is missing"]
    if source is not None:
        wanted = sorted(_relative(p, source) for p in local_closure(source).values())
        (kept / MANIFEST).write_text("".join(f"{name}\n" for name in wanted), encoding="utf-8")
    elif (kept / MANIFEST).is_file():
        wanted = (kept / MANIFEST).read_text(encoding="utf-8").split()
    else:
        return [*problems, f"{kept / MANIFEST} is missing (a cache made by an older build)"]
    have = {_relative(p, kept) for p in local_closure(kept).values()}
    problems += [
        f"the converter imports {name}, which the build did not keep in {kept}"
        for name in wanted
        if name not in have
    ]
    return problems


def check_vllm(dest: Path) -> list[str]:
    launcher = dest / "bin" / "harmonia-vllm"
    if not launcher.is_file() or not (dest / ".complete").is_file():
        return [f"{launcher} (or {dest / '.complete'}) is missing"]
    ran = subprocess.run(
        [str(launcher), "--version"], capture_output=True, text=True, timeout=300, check=False
    )
    if ran.returncode != 0:
        return [f"{launcher} --version exited {ran.returncode}: {ran.stderr[-300:]}"]
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=["llamacpp", "vllm"])
    parser.add_argument("dest", type=Path, help="the build's folder in the live cache")
    parser.add_argument(
        "--source", type=Path, help="llamacpp: the unpacked source the build copied from"
    )
    args = parser.parse_args(argv)
    if args.kind == "llamacpp":
        problems = check_llamacpp(args.dest, args.source)
    else:
        problems = check_vllm(args.dest)
    for problem in problems:
        print(f"check_cache {args.kind}: {problem}", file=sys.stderr)
    if not problems:
        print(f"check_cache {args.kind}: {args.dest} holds what the live suite uses")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
