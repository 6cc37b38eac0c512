"""The exception hierarchy: every error harmonia raises is a :class:`HarmonyError`.

::

    HarmonyError (RuntimeError)
    ├── InputError (also ValueError): the caller's mistake
    │   ├── InputTypeError (also TypeError): a value of the wrong type
    │   ├── RenderError: a conversation or message that cannot be rendered
    │   ├── DisallowedSpecialTokenError: special-token text ``encode`` may not encode
    │   ├── DecodeError: token ids that cannot be decoded
    │   └── openai_compat.RequestError: an OpenAI request that cannot be converted
    │       ├── openai_compat.UnsupportedContentError
    │       └── openai_compat.ToolCallMatchError
    ├── ModelOutputError: the model's output breaks the format
    │   ├── ParseError: a completion that strict parsing rejects
    │   └── constrained.TokenRejectedError: a token the grammar does not allow
    ├── constrained.ConstrainedUnavailableError (also ImportError): its extra is missing
    ├── VocabularyError: the tokenizer vocabulary is missing or corrupt
    ├── ToolError: a tool failed, or was called in a way it cannot serve
    │   └── SandboxUnavailableError: the python tool's sandbox cannot start here
    └── EngineError: an inference engine failed

No module raises a bare built-in exception (``tests/test_raises_only_harmony_errors.py``
checks it). The subclasses say whose
fault it is and where it happened, so a server can answer 400 for a bad request
(:class:`InputError`) and recover or retry for bad model output
(:class:`ModelOutputError`), instead of turning everything into a 500.

``HarmonyError`` derives from ``RuntimeError`` because the reference's does, so
``except RuntimeError`` handlers written for ``openai_harmony`` keep working.
"""

from __future__ import annotations

from collections.abc import Collection


class HarmonyError(RuntimeError):
    """Root of every error raised by harmonia."""


class InputError(HarmonyError, ValueError):
    """The caller passed something harmonia cannot use (also a ``ValueError``)."""


class InputTypeError(InputError, TypeError):
    """The caller passed a value of the wrong type (also a ``TypeError``, as Python's own is)."""


class RenderError(InputError):
    """A conversation or message cannot be rendered.

    ``message_index`` is the index of the offending message in the conversation
    (``None`` for a lone message) and ``path`` a JSON-style path inside it, such
    as ``"content[0].tools.functions.tools[1].name"``.
    """

    def __init__(self, reason: str, *, message_index: int | None = None, path: str = "") -> None:
        self.reason, self.message_index, self.path = reason, message_index, path
        where = []
        if message_index is not None:
            where.append(f"message {message_index}")
        if path:
            where.append(path)
        super().__init__(f"{reason} (at {', '.join(where)})" if where else reason)


class DisallowedSpecialTokenError(InputError):
    """``encode`` met the text of a special token that was not allowed."""

    def __init__(self, message: str, *, token: str, position: int) -> None:
        self.token = token
        self.position = position
        super().__init__(message)


class DecodeError(InputError):
    """Token ids that cannot be decoded: unknown ids, or bytes that are not UTF-8."""

    def __init__(self, message: str, *, token_index: int | None = None) -> None:
        self.token_index = token_index
        super().__init__(message)


class ModelOutputError(HarmonyError):
    """The model's output does not follow the harmony format."""


class ParseError(ModelOutputError):
    """A completion cannot be parsed in strict mode.

    ``state`` is the parser state when the problem was found (a ``StreamState``
    value such as ``"Header"``), ``token`` the offending token id (``None`` at
    end of stream), ``token_text`` its text and ``token_index`` its position in
    the token stream.
    """

    def __init__(
        self,
        reason: str,
        *,
        state: str,
        token: int | None = None,
        token_text: str | None = None,
        token_index: int | None = None,
    ) -> None:
        self.reason, self.state, self.token_index = reason, state, token_index
        self.token, self.token_text = token, token_text
        super().__init__(reason)

    def describe(self) -> str:
        """A one-line explanation naming the state, the token and its position."""
        if self.token is None:
            return f"{self.reason} (state {self.state}, at end of stream)"
        return (
            f"{self.reason} (state {self.state}, token {self.token} {self.token_text!r} "
            f"at index {self.token_index})"
        )


class VocabularyError(HarmonyError):
    """The tokenizer vocabulary is missing, corrupt or cannot be loaded."""


class ToolError(HarmonyError):
    """A tool failed, or was called in a way it cannot serve.

    ``tool`` names the tool (the recipient, such as ``"browser.open"`` or
    ``"functions.get_weather"``). Tool runtimes raise it; the dispatcher turns
    it into a reply message the model can read, so it never escapes an agent
    loop. ``message`` is written for the model: what was wrong and what is valid.
    """

    def __init__(self, message: str, *, tool: str | None = None) -> None:
        self.tool = tool
        super().__init__(message)


class EngineError(HarmonyError):
    """An inference engine failed: unreachable, refused the request, or broke mid-stream.

    ``engine`` names the engine (``"vllm"``, ``"llama.cpp"``, ``"transformers"``, ...)
    and ``url`` the address it was reached at, when there is one.
    """

    def __init__(self, message: str, *, engine: str | None = None, url: str | None = None) -> None:
        self.engine = engine
        self.url = url
        super().__init__(message)


class SandboxUnavailableError(ToolError):
    """The python tool's sandbox cannot start here; the message says why and how to fix it."""


def check_choice(
    value: object,
    allowed: Collection[str],
    name: str,
    *,
    error: type[HarmonyError] = InputError,
    hint: str = "",
) -> None:
    """Refuse ``value`` unless it is one of ``allowed``, with an ``error`` that lists them.

    >>> check_choice("xml", ("json", "jsonl"), "input format")
    Traceback (most recent call last):
    ...
    harmonia._errors.InputError: unknown input format 'xml': choose one of 'json', 'jsonl'
    """
    if value not in allowed:
        choices = ", ".join(map(repr, allowed))
        raise error(f"unknown {name} {value!r}: choose one of {choices}{hint}")


def check_int(name: str, value: object, *, minimum: int, optional: bool = False) -> None:
    """Refuse ``value`` unless it is an int (not a bool) >= ``minimum``, or ``None`` if optional.

    >>> check_int("limit", None, minimum=1, optional=True)
    >>> check_int("limit", 0, minimum=1, optional=True)
    Traceback (most recent call last):
    ...
    harmonia._errors.InputError: limit must be None or an int >= 1, not 0
    """
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        allowed = f"None or an int >= {minimum}" if optional else f"an int >= {minimum}"
        raise InputError(f"{name} must be {allowed}, not {value!r}")


#: The hint of each extra, worked out once per process (see :func:`install_hint`).
_HINTS: dict[str, str] = {}


def install_hint(extra: str) -> str:
    """The command that installs harmonia's ``extra`` from where this harmonia came from.

    harmonia is not on the package index, so ``pip install 'harmonia[serve]'``
    cannot work. From a checkout (an editable install, or ``src`` on the path)
    the hint is ``pip install -e '<checkout>[serve]'`` (``'.[serve]'`` in the
    checkout itself); from a wheel or a folder installed by path,
    ``pip install '<that path>[serve]'``; otherwise the extra's own requirements,
    which pip installs into any environment. Every error and doc names an extra
    through this function, so a hint never names a command that cannot work.
    """
    hint = _HINTS.get(extra)
    if hint is None:
        hint = _HINTS[extra] = _install_hint(extra)
    return hint


def _install_hint(extra: str, here: str = __file__) -> str:
    """The hint for ``extra`` when this module's file is ``here``."""
    import shlex
    from pathlib import Path

    def target(path: Path) -> str:
        try:
            shown = "." if path.resolve() == Path.cwd().resolve() else str(path)
        except OSError:
            shown = str(path)
        return shlex.quote(f"{shown}[{extra}]")

    # A checkout: the package sits in <root>/src/harmonia next to pyproject.toml.
    root = Path(here).resolve().parent.parent.parent
    if (root / "pyproject.toml").is_file() and (root / "src" / "harmonia").is_dir():
        return f"pip install -e {target(root)}"
    import json
    from importlib import metadata
    from urllib.parse import unquote, urlparse

    try:
        dist = metadata.distribution("harmonia")
    except metadata.PackageNotFoundError:
        return f"install harmonia's {extra!r} extra (pyproject.toml lists it)"
    try:  # PEP 610: where pip installed it from
        url = str(json.loads(dist.read_text("direct_url.json") or "{}").get("url", ""))
    except ValueError:
        url = ""
    if url.startswith("file://"):
        return f"pip install {target(Path(unquote(urlparse(url).path)))}"
    marker = f'extra == "{extra}"'
    wanted = [
        req.split(";")[0].strip() for req in dist.requires or [] if marker in req.replace("'", '"')
    ]
    if not wanted:
        return f"install harmonia's {extra!r} extra (pyproject.toml lists it)"
    return "pip install " + " ".join(shlex.quote(w) for w in wanted)
