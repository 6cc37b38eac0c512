"""Typed Python functions as harmony function tools.

``@function_tool`` reads a function's signature and docstring into a
:class:`harmonia.ToolDescription` (name, description, JSON schema of the
parameters with their descriptions and defaults). :class:`FunctionTools` is
the runtime of a namespace of such functions (``functions`` by default): it
validates the model's arguments against the schema, converts them to the
annotated types, runs the function (sync ones in a worker thread, so the event
loop is never blocked) under a timeout, and serialises the result.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import typing
from collections.abc import Callable, Iterable
from typing import Any, Generic, ParamSpec, TypeVar, overload

from .. import InputError, ToolDescription, ToolError, ToolNamespaceConfig
from .._names import FUNCTIONS
from .._runtime import TIMEOUTS
from ._arguments import load_arguments
from ._base import ToolCall, ToolOutput
from ._convert import to_json_text, to_python
from ._docstrings import parse_docstring
from ._schema import json_default, object_schema, schema_for

P = ParamSpec("P")
R = TypeVar("R")

#: Seconds a function tool may run before its call is answered with a timeout.
DEFAULT_FUNCTION_TIMEOUT = TIMEOUTS.function_call


class FunctionTool(Generic[P, R]):
    """A Python function with its harmony declaration; calling it calls the function.

    >>> @function_tool
    ... def add(a: int, b: int = 2) -> int:
    ...     '''Add two numbers.
    ...
    ...     Args:
    ...         a: The first number.
    ...     '''
    ...     return a + b
    >>> add(1), add.description.description
    (3, 'Add two numbers.')
    >>> add.description.parameters["properties"]["a"]
    {'type': 'integer', 'description': 'The first number.'}
    >>> add.description.parameters["required"]
    ['a']
    """

    def __init__(
        self,
        fn: Callable[P, R],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = DEFAULT_FUNCTION_TIMEOUT,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        self.timeout = timeout
        summary, param_docs = parse_docstring(inspect.getdoc(fn))
        self._signature = inspect.signature(fn)
        self._hints = _type_hints(fn)
        parameters = self._parameters_schema(param_docs)
        self.description = ToolDescription(self.name, description or summary, parameters)
        functools.update_wrapper(self, fn)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"FunctionTool({self.name!r})"

    def _parameters_schema(self, docs: dict[str, str]) -> dict[str, Any]:
        properties: dict[str, Any] = {}
        required: list[str] = []
        extra_allowed = False
        for param in self._signature.parameters.values():
            if param.kind is inspect.Parameter.VAR_POSITIONAL:
                continue
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                extra_allowed = True
                continue
            hint = self._hints.get(param.name, Any)
            prop = schema_for(hint, where=f"parameter {param.name!r} of {self.name}")
            if docs.get(param.name):
                prop.setdefault("description", docs[param.name])
            if param.default is inspect.Parameter.empty:
                required.append(param.name)
            else:
                ok, value = json_default(param.default)
                if ok and value is not None:
                    prop["default"] = value
            properties[param.name] = prop
        schema = object_schema(properties, required)
        if not extra_allowed:
            schema["additionalProperties"] = False
        return schema

    async def invoke(self, arguments: dict[str, Any]) -> Any:
        """Run the function with JSON ``arguments`` (already validated), converted to its types."""
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for param in self._signature.parameters.values():
            if param.kind is inspect.Parameter.VAR_POSITIONAL:
                continue
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                known = self._signature.parameters
                kwargs.update({k: v for k, v in arguments.items() if k not in known})
                continue
            if param.name not in arguments:
                continue
            try:
                value = to_python(arguments[param.name], self._hints.get(param.name, Any))
            except Exception as exc:  # e.g. a pydantic constraint the schema could not express
                raise ToolError(
                    f"invalid value for parameter {param.name!r} of {self.name}: {exc}",
                    tool=self.name,
                ) from None
            if param.kind is inspect.Parameter.POSITIONAL_ONLY:
                args.append(value)
            else:
                kwargs[param.name] = value
        if inspect.iscoroutinefunction(self.fn):
            return await self.fn(*args, **kwargs)
        result = await asyncio.to_thread(functools.partial(self.fn, *args, **kwargs))
        if inspect.isawaitable(result):  # a sync wrapper around a coroutine function
            return await result
        return result


def _type_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:  # a forward reference that does not resolve
        name = getattr(fn, "__name__", repr(fn))
        raise InputError(f"cannot read the type annotations of {name}: {exc}") from None


@overload
def function_tool(fn: Callable[P, R], /) -> FunctionTool[P, R]: ...
@overload
def function_tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = DEFAULT_FUNCTION_TIMEOUT,
) -> Callable[[Callable[P, R]], FunctionTool[P, R]]: ...
def function_tool(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = DEFAULT_FUNCTION_TIMEOUT,
) -> FunctionTool[P, R] | Callable[[Callable[P, R]], FunctionTool[P, R]]:
    """Turn a typed function (sync or async) into a :class:`FunctionTool`.

    Use bare (``@function_tool``) or with options
    (``@function_tool(name="lookup", timeout=5)``). The description defaults to
    the docstring's summary; parameter descriptions come from its
    ``Args:``/``Parameters``/``:param`` sections.
    """

    def wrap(f: Callable[P, R]) -> FunctionTool[P, R]:
        return FunctionTool(f, name=name, description=description, timeout=timeout)

    return wrap(fn) if fn is not None else wrap


class FunctionTools:
    """The runtime of a namespace of function tools (``functions`` unless named otherwise).

    >>> import asyncio
    >>> tools = FunctionTools()
    >>> @tools.function
    ... def echo(text: str) -> str:
    ...     return text
    >>> call = ToolCall("functions.echo", "functions", "echo", '{"text": "hi"}')
    >>> asyncio.run(tools.call(call)).text
    'hi'
    """

    def __init__(
        self,
        functions: Iterable[FunctionTool[Any, Any] | Callable[..., Any]] = (),
        *,
        namespace: str = FUNCTIONS,
        description: str | None = None,
    ) -> None:
        self._namespace = namespace
        self._description = description
        self._functions: dict[str, FunctionTool[Any, Any]] = {}
        for fn in functions:
            self.add(fn)

    @property
    def namespace(self) -> str:
        return self._namespace

    def add(self, fn: FunctionTool[P, R] | Callable[P, R]) -> FunctionTool[P, R]:
        """Register a function (wrapped with :func:`function_tool` if it is not yet)."""
        tool = fn if isinstance(fn, FunctionTool) else FunctionTool(fn)
        if tool.name in self._functions:
            raise InputError(f"{self._namespace} already has a function named {tool.name!r}")
        self._functions[tool.name] = tool
        return tool

    def function(self, fn: Callable[P, R]) -> FunctionTool[P, R]:
        """Decorator: register ``fn`` and return its :class:`FunctionTool`."""
        return self.add(fn)

    def __getitem__(self, name: str) -> FunctionTool[Any, Any]:
        return self._functions[name]

    def namespace_config(self) -> ToolNamespaceConfig:
        tools = [f.description for f in self._functions.values()]
        return ToolNamespaceConfig(self._namespace, self._description, tools)

    async def call(self, call: ToolCall) -> ToolOutput:
        tool = self._functions.get(call.name or "")
        if tool is None:
            valid = ", ".join(f"{self._namespace}.{n}" for n in self._functions) or "none"
            raise ToolError(
                f"there is no function {call.recipient!r}. Valid functions: {valid}.",
                tool=call.recipient,
            )
        arguments = load_arguments(call, tool.description.parameters)
        try:
            result = await asyncio.wait_for(tool.invoke(arguments), tool.timeout)
        except asyncio.TimeoutError:
            raise ToolError(
                f"{call.recipient} did not finish within {tool.timeout:g} seconds",
                tool=call.recipient,
            ) from None
        return ToolOutput(to_json_text(result))

    async def aclose(self) -> None:
        """Nothing to release: functions hold no resources of the namespace's."""
