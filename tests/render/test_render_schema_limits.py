"""Tool schemas of any depth or $ref shape render or raise RenderError, quickly.

Before the limits, deep schemas crashed with RecursionError (in the TypeScript
converters and in json.dumps) and shared $refs expanded exponentially in the
corrected mode. Each generated case here must finish within a time bound and a
peak-memory bound (tracemalloc), in both TypeScript modes.
"""

from __future__ import annotations

import time
import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harmonia import (
    Conversation,
    DeveloperContent,
    InputError,
    Message,
    RenderConversationConfig,
    RenderError,
    Role,
    SystemContent,
    ToolDescription,
    ToolNamespaceConfig,
)

MODES = ("reference", "corrected")
# Per render. The unbounded cases this guards against took minutes or never
# finished; typical renders take < 0.1 s, so the bound only has to survive a
# loaded shared machine (tracemalloc also slows the render several times).
SECONDS = 20.0
PEAK_BYTES = 64 << 20

WRAPPERS = {
    "object": lambda s: {"type": "object", "properties": {"x": s}},
    "array": lambda s: {"type": "array", "items": s},
    "anyOf": lambda s: {"anyOf": [s, {"type": "null"}]},
    "oneOf": lambda s: {"oneOf": [s]},
    "allOf": lambda s: {"allOf": [s]},
    "additionalProperties": lambda s: {"type": "object", "additionalProperties": s},
    "tuple": lambda s: {"type": "array", "items": [s, {"type": "string"}]},
}


def nest(depth: int, kinds: list[str]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for level in range(depth):
        schema = WRAPPERS[kinds[level % len(kinds)]](schema)
    return schema


def conversation(where: str, schema: object) -> Conversation:
    if where == "function":
        tool = ToolDescription.new("f", "d", schema)  # type: ignore[arg-type]
        content: Any = DeveloperContent.new().with_function_tools([tool])
        role = Role.DEVELOPER
    elif where == "system":
        tool = ToolDescription.new("f", "d", schema)  # type: ignore[arg-type]
        content = SystemContent.new().with_tools(ToolNamespaceConfig("box", "a box", [tool]))
        role = Role.SYSTEM
    else:
        content = DeveloperContent.new().with_response_format("r", schema)  # type: ignore[arg-type]
        role = Role.DEVELOPER
    return Conversation.from_messages([Message.from_role_and_content(role, content)])


def bounded_render(enc: Any, conv: Conversation, mode: str) -> list[int] | RenderError:
    """Render under the time and memory bounds; the result or the RenderError."""
    config = RenderConversationConfig(typescript=mode)
    tracemalloc.start()
    start = time.perf_counter()
    try:
        result: list[int] | RenderError = enc.render_conversation(conv, config)
    except RenderError as exc:
        result = exc
    finally:
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert elapsed < SECONDS, f"took {elapsed:.2f} s"
    assert peak < PEAK_BYTES, f"peak {peak >> 20} MiB"
    return result


# --------------------------------------------------------------------------
# Depth
# --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("where", ["function", "system", "response_format"])
@pytest.mark.parametrize("kind", list(WRAPPERS))
def test_very_deep_schema_is_refused_with_its_path(
    enc: Any, mode: str, where: str, kind: str
) -> None:
    result = bounded_render(enc, conversation(where, nest(10_000, [kind])), mode)
    assert isinstance(result, RenderError)
    assert "nests more than 128 levels deep" in str(result)
    assert result.message_index == 0
    start = {
        "function": "content[0].tools.functions.tools[0].parameters",
        "system": "content[0].tools.box.tools[0].parameters",
        "response_format": "content[0].response_formats[0].schema",
    }[where]
    assert result.path.startswith(start)


@pytest.mark.parametrize("mode", MODES)
def test_depth_within_the_limit_renders(enc: Any, mode: str) -> None:
    # 110 levels of arrays: the reference renders this too (its limit is 128 for
    # the whole message), so harmonia must not refuse it.
    result = bounded_render(enc, conversation("function", nest(110, ["array"])), mode)
    assert isinstance(result, list)
    text = enc.decode_utf8(result)
    assert "type f = (_: string" + "[]" * 110 + ") => any;" in text


def test_a_content_that_contains_itself_is_refused(enc: Any) -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {}}
    schema["properties"]["me"] = schema
    result = bounded_render(enc, conversation("function", schema), "reference")
    assert isinstance(result, RenderError)
    assert "Circular reference" in str(result)


@settings(
    max_examples=24, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    depth=st.integers(0, 10_000),
    kinds=st.lists(st.sampled_from(sorted(WRAPPERS)), min_size=1, max_size=4),
    mode=st.sampled_from(MODES),
    where=st.sampled_from(["function", "system", "response_format"]),
)
def test_any_depth_renders_or_is_refused(
    enc: Any, depth: int, kinds: list[str], mode: str, where: str
) -> None:
    result = bounded_render(enc, conversation(where, nest(depth, kinds)), mode)
    if isinstance(result, RenderError):
        assert "levels deep" in str(result)
        assert depth > 40  # shallow schemas must render


# --------------------------------------------------------------------------
# $ref graphs (only the corrected mode follows $ref; the reference renders `any`)
# --------------------------------------------------------------------------


def ref_schema(edges: list[list[int]]) -> dict[str, Any]:
    """Definition D{i} is an object whose properties point at D{j} for j in edges[i]."""
    defs: dict[str, Any] = {}
    for i, targets in enumerate(edges):
        props = {f"p{k}": {"$ref": f"#/$defs/D{j}"} for k, j in enumerate(targets)}
        defs[f"D{i}"] = {"type": "object", "properties": props} if props else {"type": "string"}
    return {"type": "object", "properties": {"root": {"$ref": "#/$defs/D0"}}, "$defs": defs}


def test_flat_ref_chain_is_refused_by_depth(enc: Any) -> None:
    defs: dict[str, Any] = {f"A{i}": {"$ref": f"#/$defs/A{i + 1}"} for i in range(1000)}
    defs["A1000"] = {"type": "string"}
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/A0"}}, "$defs": defs}
    result = bounded_render(enc, conversation("function", schema), "corrected")
    assert isinstance(result, RenderError)
    assert "schema nests more than 128 levels deep (inlining $ref: #/$defs/A0 ->" in str(result)
    assert result.path == "content[0].tools.functions.tools[0].parameters"


@pytest.mark.parametrize("levels", [18, 40, 60])
def test_shared_refs_do_not_expand_exponentially(enc: Any, levels: int) -> None:
    # D_i has two properties, both D_{i+1}: the inlined text doubles per level.
    edges = [[i + 1, i + 1] for i in range(levels)] + [[]]
    result = bounded_render(enc, conversation("function", ref_schema(edges)), "corrected")
    assert isinstance(result, RenderError)
    assert "expands to more than 1048576 characters" in str(result)


def test_shared_refs_that_fit_render_in_full(enc: Any) -> None:
    edges = [[i + 1, i + 1] for i in range(4)] + [[]]
    result = bounded_render(enc, conversation("function", ref_schema(edges)), "corrected")
    assert isinstance(result, list)
    assert enc.decode_utf8(result).count("p1?: string,") == 2**3  # every leaf written out


def test_recursive_ref_renders_its_name(enc: Any) -> None:
    result = bounded_render(enc, conversation("function", ref_schema([[0, 1], []])), "corrected")
    assert isinstance(result, list)
    assert "p0?: D0," in enc.decode_utf8(result)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.integers(1, 60).flatmap(
        lambda n: st.lists(
            st.lists(st.integers(0, n - 1), max_size=4), min_size=n, max_size=n
        )  # any graph: self-loops, cycles, shared targets
    ),
    st.sampled_from(MODES),
)
def test_any_ref_graph_renders_or_is_refused(enc: Any, edges: list[list[int]], mode: str) -> None:
    result = bounded_render(enc, conversation("function", ref_schema(edges)), mode)
    if isinstance(result, RenderError):
        assert mode == "corrected"
        assert "levels deep" in str(result) or "characters" in str(result)


def test_a_very_deep_message_is_an_input_error_as_json() -> None:
    message = conversation("function", nest(10_000, ["array"])).messages[0]
    with pytest.raises(InputError, match="nests too deeply to be written as JSON"):
        message.to_json()
    with pytest.raises(InputError, match="nests too deeply"):
        Conversation.from_messages([message]).to_json()


def test_one_definition_referenced_from_many_places_is_bounded(enc: Any) -> None:
    # 20,000 fields all inlining the same 100-field definition: 2 million lines.
    big = {"type": "object", "properties": {f"f{i}": {"type": "string"} for i in range(100)}}
    props = {f"p{i}": {"$ref": "#/$defs/Big"} for i in range(20_000)}
    schema = {"type": "object", "properties": props, "$defs": {"Big": big}}
    result = bounded_render(enc, conversation("function", schema), "corrected")
    assert isinstance(result, RenderError)
    assert "expands to more than 1048576 characters" in str(result)
