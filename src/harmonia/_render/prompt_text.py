"""The texts of system and developer messages, built exactly as the reference does.

Each function returns one string; the renderer encodes it with a single BPE call
(the reference tokenises across section boundaries, so must we).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from .._content import DeveloperContent, ResponseFormat, SystemContent, ToolNamespaceConfig
from .._errors import RenderError
from .._names import FUNCTIONS
from .schema_check import check_schema

SchemaConverter = Callable[[Any], str]

# The same characters as str.isspace(): re's \s is defined by it for str patterns.
_WHITESPACE = re.compile(r"\s")

FUNCTIONS_LINE = "\nCalls to these tools must go to the commentary channel: 'functions'."


def rust_lines(text: str) -> list[str]:
    """Split like Rust's ``str::lines``: on ``\\n`` only, dropping one ``\\r`` before it.

    >>> rust_lines("a\\r\\nb\\n"), rust_lines("a\\rb"), rust_lines("")
    (['a', 'b'], ['a\\rb'], [])
    """
    *terminated, last = text.split("\n")  # every piece but the last was followed by "\n"
    lines = [piece.removesuffix("\r") for piece in terminated]
    return [*lines, last] if last else lines


def namespace_block(ns: ToolNamespaceConfig, to_typescript: SchemaConverter, path: str = "") -> str:
    """One namespace's text; ``path`` locates ``ns`` in its content, for errors."""
    lines = [f"## {ns.name}\n"]
    if ns.description is not None:
        prefix = "// " if ns.tools else ""
        lines += [prefix + line for line in rust_lines(ns.description)]
    if ns.tools:
        _check_declarable(ns.name, f"{path}.name", "tool namespace")
        lines.append(f"namespace {ns.name} {{\n")
        for i, tool in enumerate(ns.tools):
            where = f"{path}.tools[{i}]"
            _check_declarable(tool.name, f"{where}.name", "tool")
            lines += ["// " + line for line in rust_lines(tool.description)]
            if tool.parameters is None:
                lines.append(f"type {tool.name} = () => any;\n")
                continue
            check_schema(tool.parameters, f"{where}.parameters")
            try:
                params = to_typescript(tool.parameters)
            except RenderError as exc:
                raise RenderError(exc.reason, path=f"{where}.parameters{exc.path}") from None
            lines.append(f"type {tool.name} = (_: {params}) => any;\n")
        lines.append(f"}} // namespace {ns.name}")
    return "\n".join(lines)


def _check_declarable(name: object, path: str, what: str) -> None:
    # `type get weather = ...` or `type  = ...` declares nothing the model can call
    # (the reference renders them anyway); such a name is refused here.
    if not isinstance(name, str) or not name or _WHITESPACE.search(name):
        raise RenderError(
            f"{what} name {name!r} cannot be declared: use a non-empty name without "
            "whitespace, such as 'get_weather'",
            path=path,
        )


def tools_section(tools: Mapping[str, ToolNamespaceConfig], to_typescript: SchemaConverter) -> str:
    # Namespaces are ordered by their key (the reference keeps them in a BTreeMap).
    blocks = [namespace_block(tools[key], to_typescript, f".tools.{key}") for key in sorted(tools)]
    return "# Tools\n\n" + "\n\n".join(blocks)


def system_text(
    content: SystemContent, has_function_tools: bool, to_typescript: SchemaConverter
) -> str:
    sections = []
    cutoff, date = content.knowledge_cutoff, content.conversation_start_date
    lines = (
        content.model_identity,
        None if cutoff is None else "Knowledge cutoff: " + cutoff,
        None if date is None else "Current date: " + date,
    )
    top = [line for line in lines if line is not None]
    if top:
        sections.append("\n".join(top))
    if content.reasoning_effort is not None:
        sections.append("Reasoning: " + content.reasoning_effort.value.lower())
    if content.tools:
        sections.append(tools_section(content.tools, to_typescript))
    cc = content.channel_config
    if cc is not None and cc.valid_channels:
        line = "# Valid channels: " + ", ".join(cc.valid_channels) + "."
        if cc.channel_required:
            line += " Channel must be included for every message."
        if has_function_tools:
            line += FUNCTIONS_LINE
        sections.append(line)
    return "\n\n".join(sections)


def response_format_block(fmt: ResponseFormat, path: str = "") -> str:
    check_schema(fmt.schema, f"{path}.schema")
    lines = [f"## {fmt.name}", ""]
    if fmt.description is not None:
        lines += ["// " + line for line in rust_lines(fmt.description)]
    lines.append(json.dumps(fmt.schema, ensure_ascii=False, separators=(",", ":"), allow_nan=False))
    return "\n".join(lines)


def developer_text(content: DeveloperContent, to_typescript: SchemaConverter) -> str:
    sections = []
    if content.instructions is not None:
        sections += ["# Instructions", content.instructions]
    if content.tools:
        sections.append(tools_section(content.tools, to_typescript))
    if content.response_formats:
        blocks = [
            response_format_block(f, f".response_formats[{i}]")
            for i, f in enumerate(content.response_formats)
        ]
        sections.append("# Response Formats\n\n" + "\n\n".join(blocks))
    return "\n\n".join(sections)


def has_function_tools(content: DeveloperContent) -> bool:
    """Whether this developer content declares at least one function tool."""
    functions = (content.tools or {}).get(FUNCTIONS)
    return functions is not None and bool(functions.tools)
