from __future__ import annotations

import asyncio
import dataclasses
import enum
import threading
import time
from typing import Annotated, Any, Literal, Optional, TypedDict, Union

import pydantic
import pytest
from typing_extensions import NotRequired

import harmonia
from harmonia import InputError, Message, Role
from harmonia.tools import FunctionTools, Toolbox, ToolCall, function_tool, schema_for


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


class Point(TypedDict):
    x: int
    y: int
    label: NotRequired[str]


class Loose(TypedDict, total=False):
    a: str


@dataclasses.dataclass
class Box:
    width: float
    tags: list[str] = dataclasses.field(default_factory=list)
    name: str = "box"


class Person(pydantic.BaseModel):
    name: str
    age: Optional[int] = None  # noqa: UP045 - the Optional spelling is under test


class Team(pydantic.BaseModel):
    lead: Person
    members: list[Person] = []


@pytest.mark.parametrize(
    ("annotation", "schema"),
    [
        (str, {"type": "string"}),
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (bool, {"type": "boolean"}),
        (None, {"type": "null"}),
        (Any, {}),
        (Optional[int], {"type": ["integer", "null"]}),  # noqa: UP045
        (Union[int, str], {"type": ["integer", "string"]}),  # noqa: UP007
        (int | str | None, {"type": ["integer", "string", "null"]}),
        (list[str], {"type": "array", "items": {"type": "string"}}),
        (list, {"type": "array"}),
        (set[int], {"type": "array", "items": {"type": "integer"}}),
        (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
        (
            tuple[int, str],
            {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
             "minItems": 2, "maxItems": 2},
        ),
        (dict[str, float], {"type": "object", "additionalProperties": {"type": "number"}}),
        (dict, {"type": "object"}),
        (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
        (Literal[1, 2], {"type": "integer", "enum": [1, 2]}),
        (Literal["a", 1], {"enum": ["a", 1]}),
        (
            Literal["a"] | Literal["b"] | None,
            {"type": ["string", "null"], "enum": ["a", "b", None]},
        ),
        (Unit, {"type": "string", "enum": ["celsius", "fahrenheit"]}),
        (Annotated[str, "A city."], {"type": "string", "description": "A city."}),
        (
            Point,
            {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"},
             "label": {"type": "string"}}, "required": ["x", "y"]},
        ),
        (Loose, {"type": "object", "properties": {"a": {"type": "string"}}}),
        (
            Box,
            {"type": "object", "properties": {
                "width": {"type": "number"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "name": {"type": "string", "default": "box"}}, "required": ["width"]},
        ),
        (
            Person,
            {"type": "object", "properties": {"name": {"type": "string"},
             "age": {"type": ["integer", "null"]}}, "required": ["name"]},
        ),
        (
            Optional[Box],  # noqa: UP045
            {"type": "object", "properties": {
                "width": {"type": "number"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "name": {"type": "string", "default": "box"}}, "required": ["width"],
             "nullable": True},
        ),
        (
            Union[Point, str],  # noqa: UP007
            {"oneOf": [schema_for(Point), {"type": "string"}]},
        ),
    ],
)  # fmt: skip
def test_schema_for_every_supported_annotation(annotation: Any, schema: dict[str, Any]) -> None:
    assert schema_for(annotation) == schema


def test_nested_pydantic_models_are_inlined_without_refs() -> None:
    schema = schema_for(Team)
    assert "$defs" not in str(schema) and "$ref" not in str(schema) and "title" not in schema
    assert schema["properties"]["lead"]["properties"]["name"] == {"type": "string"}
    assert schema["properties"]["members"]["items"]["required"] == ["name"]


def test_unsupported_annotation_names_the_parameter() -> None:
    with pytest.raises(InputError, match="parameter 'when' of f"):

        @function_tool
        def f(when: threading.Thread) -> None: ...


def test_docstring_styles_give_descriptions() -> None:
    @function_tool
    def google(city: str, days: int = 3) -> str:
        """Forecast for a city.

        Args:
            city: The city, e.g. Oslo.
            days: How many days,
                at most 7.

        Returns:
            The forecast.
        """
        return city

    @function_tool
    def numpy(city: str) -> str:
        """Forecast.

        Parameters
        ----------
        city : str
            The city name.

        Returns
        -------
        str
        """
        return city

    @function_tool(name="rest_style", description="Overridden.")
    def rest(city: str) -> str:
        """Forecast.

        :param city: The city (reST).
        :returns: text
        """
        return city

    params = google.description.parameters
    assert google.description.description == "Forecast for a city."
    assert params == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "The city, e.g. Oslo."},
            "days": {"type": "integer", "description": "How many days, at most 7.", "default": 3},
        },
        "required": ["city"],
        "additionalProperties": False,
    }
    assert numpy.description.description == "Forecast."
    assert numpy.description.parameters is not None and rest.description.parameters is not None
    assert numpy.description.parameters["properties"]["city"]["description"] == "The city name."
    assert rest.description.name == "rest_style"
    assert rest.description.description == "Overridden."
    assert rest.description.parameters["properties"]["city"]["description"] == "The city (reST)."


def test_declaration_renders_into_the_developer_message(enc: harmonia.HarmonyEncoding) -> None:
    @function_tool
    def get_weather(location: str, unit: Unit = Unit.CELSIUS) -> str:
        """Gets the weather.

        Args:
            location: The city and state.
        """
        return ""

    tools = FunctionTools([get_weather])
    dev = harmonia.DeveloperContent.new().with_function_tools(tools.namespace_config().tools)
    text = enc.decode(enc.render(Message.from_role_and_content(Role.DEVELOPER, dev)))
    assert (
        "// Gets the weather.\ntype get_weather = (_: {\n"
        "// The city and state.\nlocation: string,\n"
        'unit?: "celsius" | "fahrenheit", // default: celsius\n}) => any;'
    ) in text


calls: list[tuple[str, Any]] = []


@function_tool
def plan(
    point: Point, box: Box, unit: Unit, who: Person, tags: tuple[str, int], scale: float = 1.0
) -> dict[str, Any]:
    """Plans."""
    calls.append(("plan", (point, box, unit, who, tags, scale)))
    return {"unit": unit, "box": box, "who": who}


@function_tool
async def slow(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "done"


@function_tool(timeout=0.05)
async def slower(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "done"


@function_tool
def blocking(seconds: float) -> str:
    """A sync function: it must run in a thread, not on the event loop."""
    time.sleep(seconds)
    return threading.current_thread().name


LOOP_RAN = threading.Event()


@function_tool
def waits_for_the_loop() -> bool:
    """A sync function that returns once the event loop has run something else."""
    return LOOP_RAN.wait(timeout=30)


@function_tool
def nothing() -> None:
    return None


@function_tool
def fails(n: int) -> int:
    raise ValueError(f"n={n} is too large")


def _dispatch(box: Toolbox, recipient: str, body: str) -> Message:
    message = Message.from_role_and_content(Role.ASSISTANT, body).with_recipient(recipient)
    reply = asyncio.run(box.dispatch(message.with_channel("commentary")))
    assert reply is not None and reply.channel == "commentary"
    return reply


@pytest.fixture
def box() -> Toolbox:
    return Toolbox(
        [FunctionTools([plan, slow, slower, blocking, waits_for_the_loop, nothing, fails])]
    )


def test_arguments_are_converted_to_the_annotated_types(box: Toolbox) -> None:
    calls.clear()
    body = (
        '{"point": {"x": 1, "y": 2}, "box": {"width": 3, "tags": ["a"]}, "unit": "fahrenheit",'
        ' "who": {"name": "Ada", "age": 36}, "tags": ["t", 7], "scale": 2}'
    )
    reply = _dispatch(box, "functions.plan", body)
    [(_, (point, box_, unit, who, tags, scale))] = calls
    assert point == {"x": 1, "y": 2}
    assert box_ == Box(width=3.0, tags=["a"]) and isinstance(box_.width, float)
    assert unit is Unit.FAHRENHEIT
    assert who == Person(name="Ada", age=36)
    assert tags == ("t", 7) and scale == 2.0 and isinstance(scale, float)
    assert reply.text == (
        '{"unit": "fahrenheit", "box": {"width": 3.0, "tags": ["a"], "name": "box"}, '
        '"who": {"name": "Ada", "age": 36}}'
    )


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('{"point": {"x": 1}}', "at $: 'box' is a required property"),
        ("not json", "are not valid JSON: Expecting value at line 1 column 1"),
        ("[1]", "must be a JSON object, not an array"),
        (
            '{"point": {"x": 1, "y": "2"}, "box": {"width": 1}, "unit": "kelvin", '
            '"who": {"name": "A"}, "tags": ["a", 1]}',
            "at $.point.y: '2' is not of type 'integer'",
        ),
        (
            '{"point": {"x": 1, "y": 2}, "box": {"width": 1}, "unit": "kelvin", '
            '"who": {"name": "A"}, "tags": ["a", 1]}',
            "at $.unit: 'kelvin' is not one of ['celsius', 'fahrenheit']",
        ),
        (
            '{"point": {"x": 1, "y": 2}, "box": {"width": 1}, "unit": "celsius", '
            '"who": {"name": "A"}, "tags": ["a", 1], "extra": 1}',
            "Additional properties are not allowed ('extra' was unexpected)",
        ),
    ],
)
def test_invalid_arguments_reach_the_model_as_a_reply(
    box: Toolbox, body: str, expected: str
) -> None:
    calls.clear()
    reply = _dispatch(box, "functions.plan", body)
    assert reply.text.startswith("Error: ")
    assert expected in reply.text
    assert "Expected arguments matching this JSON schema" in reply.text
    assert calls == []


def test_unknown_function_lists_the_valid_ones(box: Toolbox) -> None:
    reply = _dispatch(box, "functions.plot", "{}")
    assert reply.text.startswith("Error: there is no function 'functions.plot'.")
    assert "functions.plan, functions.slow" in reply.text


def test_function_timeout_and_exception(box: Toolbox) -> None:
    assert _dispatch(box, "functions.slow", '{"seconds": 0}').text == "done"
    reply = _dispatch(box, "functions.slower", '{"seconds": 5}')
    assert reply.text == "Error: functions.slower did not finish within 0.05 seconds"
    reply = _dispatch(box, "functions.fails", '{"n": 9}')
    assert reply.text == "Error: functions.fails failed: ValueError: n=9 is too large"


def test_results_serialise_none_as_json_null(box: Toolbox) -> None:
    assert _dispatch(box, "functions.nothing", "").text == "null"


def test_sync_functions_do_not_block_the_event_loop(box: Toolbox) -> None:
    # The function waits until the event loop has run another task: on the loop's
    # own thread it would wait its whole timeout and answer false. No stopwatch.
    async def main() -> list[str]:
        LOOP_RAN.clear()

        async def other_task() -> None:
            await asyncio.sleep(0)
            LOOP_RAN.set()

        message = Message.from_role_and_content(Role.ASSISTANT, "{}")
        waited, _ = await asyncio.gather(
            box.dispatch(message.with_recipient("functions.waits_for_the_loop")), other_task()
        )
        named = await box.dispatch(
            Message.from_role_and_content(Role.ASSISTANT, '{"seconds": 0}').with_recipient(
                "functions.blocking"
            )
        )
        assert waited is not None and named is not None
        return [waited.text, named.text]

    loop_ran, thread_name = asyncio.run(main())
    assert loop_ran == "true"  # the other task ran while the function waited
    assert thread_name != "MainThread"


def test_registry_rejects_duplicates_and_keeps_the_function_callable() -> None:
    tools = FunctionTools(namespace="math")

    @tools.function
    def double(x: int) -> int:
        return 2 * x

    assert double(4) == 8
    assert tools["double"] is double
    assert tools.namespace_config().name == "math"
    with pytest.raises(InputError, match="already has a function named 'double'"):
        tools.add(double)
    out = asyncio.run(tools.call(ToolCall("math.double", "math", "double", '{"x": 21}')))
    assert out.text == "42"
