"""The tools the tests declare, written once for every test folder.

Two families: the plain ``get_weather(city)`` tool the unit tests call, and the
tools and schemas of the harmony guide's examples, whose rendering the golden
files under ``golden/guide`` pin. Each comes as a harmonia ``ToolDescription``
or as the JSON an OpenAI request carries (Chat Completions nests the function
under ``"function"``; Responses does not), so that a test in one folder cannot
drift from the same tool in another.
"""

from __future__ import annotations

from typing import Any

from harmonia import ToolDescription


def city_parameters(*, closed: bool = False) -> dict[str, Any]:
    """``get_weather``'s parameters; ``closed`` forbids other properties, as strict mode wants."""
    schema: dict[str, Any] = {"type": "object", "properties": {"city": {"type": "string"}}}
    schema["required"] = ["city"]
    if closed:
        schema["additionalProperties"] = False
    return schema


WEATHER_NAME = "get_weather"
WEATHER_DESCRIPTION = "Gets the weather."
WEATHER_TOOL = ToolDescription.new(WEATHER_NAME, WEATHER_DESCRIPTION, parameters=city_parameters())


def chat_weather_tool(*, closed: bool = False) -> dict[str, Any]:
    """``get_weather`` as a Chat Completions request declares it."""
    function = {"name": WEATHER_NAME, "description": WEATHER_DESCRIPTION}
    return {
        "type": "function",
        "function": {**function, "parameters": city_parameters(closed=closed)},
    }


def responses_weather_tool(*, closed: bool = False) -> dict[str, Any]:
    """``get_weather`` as a Responses request declares it."""
    function = {"name": WEATHER_NAME, "description": WEATHER_DESCRIPTION}
    return {"type": "function", **function, "parameters": city_parameters(closed=closed)}


# -- the guide's examples ---------------------------------------------------------------------

LOCATION = {"type": "string", "description": "The city and state, e.g. San Francisco, CA"}
FORMAT = {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}
LOCATIONS = {
    "type": "array",
    "items": {"type": "string"},
    "description": 'List of city and state, e.g. ["San Francisco, CA", "New York, NY"]',
}
# (name, description, parameters or None), in the order the guide declares them.
GUIDE_FUNCTIONS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("get_location", "Gets the location of the user.", None),
    (
        "get_current_weather",
        "Gets the current weather in the provided location.",
        {
            "type": "object",
            "properties": {"location": LOCATION, "format": FORMAT},
            "required": ["location"],
        },
    ),
    (
        "get_multiple_weathers",
        "Gets the current weather in the provided list of locations.",
        {
            "type": "object",
            "properties": {"locations": LOCATIONS, "format": FORMAT},
            "required": ["locations"],
        },
    ),
]


def guide_tool_descriptions() -> list[ToolDescription]:
    return [
        ToolDescription.new(name, description, parameters=parameters)
        for name, description, parameters in GUIDE_FUNCTIONS
    ]


def guide_chat_tools() -> list[dict[str, Any]]:
    """The guide's tools as a Chat Completions request declares them."""
    tools = []
    for name, description, parameters in GUIDE_FUNCTIONS:
        function: dict[str, Any] = {"name": name, "description": description}
        if parameters is not None:
            function["parameters"] = parameters
        tools.append({"type": "function", "function": function})
    return tools


# The guide's structured-output example (``# Response Formats``).
SHOPPING_LIST = {
    "properties": {
        "items": {
            "type": "array",
            "description": "entries on the shopping list",
            "items": {"type": "string"},
        }
    },
    "type": "object",
}
