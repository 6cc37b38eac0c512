"""Optional differential checks: the new limits never refuse what the reference renders.

Deep schemas up to the reference's own limit (serde's 128 levels for the whole
message) must render byte-exact; beyond it both libraries refuse. Skipped unless
``openai_harmony`` is installed; ``test_render_schema_limits.py`` checks the
limits without it.
"""

from __future__ import annotations

from typing import Any

import pytest

import harmonia

ref: Any = pytest.importorskip("openai_harmony", reason="differential checks are optional")
pytestmark = pytest.mark.differential

WRAPPERS = {
    "object": lambda s: {"type": "object", "properties": {"x": s}},
    "array": lambda s: {"type": "array", "items": s},
    "oneOf": lambda s: {"oneOf": [s, {"type": "string"}]},
    "anyOf": lambda s: {"anyOf": [s]},
}


def render(lib: Any, enc: Any, schema: Any, system: bool) -> list[int] | None:
    tool = lib.ToolDescription.new("f", "d", schema)
    if system:
        ns = lib.ToolNamespaceConfig(name="box", description=None, tools=[tool])
        content = lib.SystemContent.new().with_tools(ns)
        role = lib.Role.SYSTEM
    else:
        content = lib.DeveloperContent.new().with_function_tools([tool])
        role = lib.Role.DEVELOPER
    conv = lib.Conversation.from_messages([lib.Message.from_role_and_content(role, content)])
    try:
        return list(enc.render_conversation(conv))
    except Exception:  # the reference raises ValueError; harmonia RenderError
        return None


@pytest.mark.parametrize("system", [False, True])
@pytest.mark.parametrize("kind", list(WRAPPERS))
def test_every_depth_the_reference_renders_renders_the_same(
    enc: Any, ref_enc: Any, kind: str, system: bool
) -> None:
    schema: Any = {"type": "string"}
    rendered_by_reference = 0
    for _ in range(130):
        schema = WRAPPERS[kind](schema)
        theirs = render(ref, ref_enc, schema, system)
        ours = render(harmonia, enc, schema, system)
        if theirs is not None:
            rendered_by_reference += 1
            assert ours == theirs
    assert rendered_by_reference >= 25  # the comparison covered real depths
