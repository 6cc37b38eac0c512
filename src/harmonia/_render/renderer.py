"""Messages and conversations to token ids, byte-exact with the reference.

A message is not rendered as one string: each header piece and each content part
is encoded on its own (the reference does, and the ids differ when text runs
together), and format tokens are appended by id. System and developer texts are
expensive (tools, TypeScript), so their encodings are cached by *value*: the key
is the content's JSON, so a later change to the object can never hit a stale entry.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Sequence
from typing import Any, Final, TypeVar

from .._content import Content, DeveloperContent, SystemContent, TextContent
from .._enums import NAMED_ROLES, Role
from .._errors import RenderError, check_choice
from .._message import (
    DEFAULT_TYPESCRIPT_MODE,
    Author,
    Conversation,
    Message,
    RenderConversationConfig,
)
from .._names import CHANNELS, CONSTRAIN, FINAL, TYPESCRIPT_MODES, TypeScriptMode, is_tool_name
from .._tokenizer import Tokenizer
from .._tokenizer import special_tokens as st
from .content_key import Schemas, content_key
from .cot import dropped_indices, resolve_policy
from .prompt_text import developer_text, has_function_tools, system_text
from .serde_json import MAX_NESTING, RoundTripped, serde_parse, too_deep, write_json
from .spans import RENDER_MODES, MessageSpans, RenderedConversation, RenderMode, SpanRecord

TYPESCRIPT_REFERENCE: Final[TypeScriptMode] = "reference"
TYPESCRIPT_CORRECTED: Final[TypeScriptMode] = "corrected"

_PIECE_CACHE_LIMIT: Final = 8192
_Header = tuple[list[int], int, tuple[int, int, int, int]]
_CONTENT_CACHE_LIMIT: Final = 512
# Message texts repeat: a chat server re-renders the whole history every turn.
# Texts up to this long are cached, until the cached texts total _TEXT_CACHE_CHARS.
_CACHED_TEXT_CHARS: Final = 4096
_TEXT_CACHE_CHARS: Final = 1 << 20
_SPACE: Final = [220]  # " "
K = TypeVar("K")
V = TypeVar("V")


def typescript_converter(mode: TypeScriptMode) -> Callable[[Any], str]:
    """The schema-to-TypeScript function of a mode (imported on first use)."""
    converter = _CONVERTERS.get(mode) if isinstance(mode, str) else None
    if converter is None:
        converter = _CONVERTERS[mode] = _import_converter(mode)
    return converter


def _import_converter(mode: TypeScriptMode) -> Callable[[Any], str]:
    check_choice(mode, TYPESCRIPT_MODES, "typescript mode", error=RenderError)
    from . import typescript

    if mode == TYPESCRIPT_REFERENCE:
        return typescript.schema_to_typescript
    return typescript.schema_to_typescript_corrected


# Filled on first use, so that importing the renderer does not import the converters.
_CONVERTERS: dict[str, Callable[[Any], str]] = {}


class Renderer:
    """Renders with one tokenizer. Safe to share: caches are value-keyed and only grow."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        # The engine, not its bound method: the auto engine rebinds encode_ordinary
        # to the fast encoder when it switches, and each call looks it up.
        self._engine = tokenizer.engine
        self._pieces: dict[str, list[int]] = {}
        self._contents: dict[tuple[object, ...], list[int]] = {}
        self._texts: dict[str, list[int]] = {}
        self._texts_size = 0  # characters held by _texts
        # Header fields by value, each checked when it enters (see _header).
        self._names: dict[str, list[int]] = {}
        self._tool_names: dict[str, list[int]] = {}
        self._recipients: dict[str, list[int]] = {}
        self._channels: dict[str, list[int]] = {}
        self._content_types: dict[str, list[int]] = {}
        # Whole headers by their fields: (ids through <|message|>, end token, where the
        # recipient, channel, content type and <|message|> begin).
        self._headers: dict[tuple[object, ...], _Header] = {}

        # The format's own words are encoded once: a role, or a channel the format
        # defines, is the same few ids in every header (not text a caller wrote).
        encode = self._engine.encode_ordinary
        self._roles: dict[Role, list[int]] = {role: encode(role.value) for role in Role}
        self._standard_channels = {channel: encode(channel) for channel in CHANNELS}
        self._channels.update(self._standard_channels)
        # So are the headers made of them alone (a role, perhaps a channel the
        # format defines): `<|start|>user<|message|>` is no caller's text, and
        # clear_caches keeps them as it keeps the roles.
        for role in NAMED_ROLES.values():  # a tool's header is its name: the caller's
            for channel in (None, *CHANNELS):
                header = Message(Author(role), [], channel=channel)
                self._new_header((role, None, None, channel, None), header, None)
        self._format_headers = dict(self._headers)

    def clear_caches(self) -> None:
        """Forget every cached encoding of text (the benchmark times cold renders so)."""
        self._pieces.clear()
        self._contents.clear()
        self._texts.clear()
        self._texts_size = 0
        for fields in (self._names, self._tool_names, self._recipients, self._content_types):
            fields.clear()
        self._channels.clear()
        self._headers.clear()
        self._headers.update(self._format_headers)
        self._channels.update(self._standard_channels)

    # -- encoding helpers -----------------------------------------------------

    def _text(self, text: str, index: int | None, path: str) -> list[int]:
        if not text:
            return []
        try:
            return self._engine.encode_ordinary(text)
        except (TypeError, UnicodeEncodeError):
            if isinstance(text, str):
                reason = "text contains a lone surrogate and is not valid Unicode"
            else:
                reason = f"expected a string, got {type(text).__name__}"
            raise RenderError(reason, message_index=index, path=path) from None

    def _message_text(self, text: str, index: int | None, path: str) -> list[int]:
        """Encode a message's text; short ones are cached (callers never mutate the ids)."""
        ids = self._texts.get(text) if type(text) is str else None
        if ids is None:
            ids = self._new_message_text(text, index, path)
        return ids

    def _new_message_text(self, text: str, index: int | None, path: str) -> list[int]:
        """Encode a message's text not in the cache, and cache it when short."""
        ids = self._text(text, index, path)
        if len(text) <= _CACHED_TEXT_CHARS:
            if self._texts_size >= _TEXT_CACHE_CHARS:
                self._texts.clear()
                self._texts_size = 0
            self._texts[text] = ids
            self._texts_size += len(text)
        return ids

    def _piece(self, text: str, index: int | None, path: str) -> list[int]:
        """Encode a short header piece, cached (these repeat in every message)."""
        ids = self._pieces.get(text)
        if ids is None:
            ids = _store(self._pieces, text, self._text(text, index, path))
        return ids

    # -- one message ----------------------------------------------------------

    def _header(self, message: Message, index: int | None, marks: list[int]) -> list[int]:
        """``<|start|>`` to just before ``<|message|>``.

        Each field's ids are cached by its value, in one cache per field: a value
        is checked (see :func:`_check_header`) when it first enters its cache, so a
        repeated header costs dictionary lookups only. The offsets where the
        recipient, the channel and the content type begin are appended to ``marks``
        (the renderer's spans).
        """
        role = message.author.role
        out = [st.START]
        name = message.author.name
        if role is Role.TOOL:
            if name is None:
                raise RenderError(
                    "Tools should have a name!", message_index=index, path="author.name"
                )
            ids = self._tool_names.get(name)
            if ids is None:
                _check_tool_name(name, index)
                ids = self._field(self._tool_names, name, name, index, "author.name")
            out += ids
        else:
            out += self._roles[role]
            if name is not None:
                ids = self._names.get(name)
                if ids is None:
                    _check_word(name, index, "author.name", "author name")
                    ids = self._field(self._names, name, ":" + name, index, "author.name")
                out += ids
        marks.append(len(out))
        recipient = message.recipient
        addressed = recipient is not None and recipient != "all"  # "all" is not written
        if recipient is not None and addressed:
            ids = self._recipients.get(recipient)
            if ids is None:
                _check_word(recipient, index, "recipient", "recipient")
                ids = self._field(
                    self._recipients, recipient, " to=" + recipient, index, "recipient"
                )
            out += ids
        marks.append(len(out))
        channel = message.channel
        if channel is not None:
            out.append(st.CHANNEL)
            ids = self._channels.get(channel)
            if ids is None:
                _check_channel(channel, index)
                ids = self._field(self._channels, channel, channel, index, "channel")
            out += ids
        marks.append(len(out))
        content_type = message.content_type
        if content_type is not None:
            ids = self._content_types.get(content_type)
            if ids is None:
                ids = self._content_type(content_type, index)  # checks it is a string
            if channel == "" and not content_type.startswith(CONSTRAIN):
                raise RenderError(
                    _EMPTY_CHANNEL_TYPE.format(content_type), message_index=index, path="channel"
                )
            if not addressed and not content_type.startswith(CONSTRAIN):
                # `<|channel|>final json` reads back as recipient "json".
                raise RenderError(
                    f"content type {content_type!r} without a recipient would read back as "
                    f"the recipient: write it as '<|constrain|>{content_type}' or add a "
                    "recipient",
                    message_index=index,
                    path="content_type",
                )
            out += ids
        return out

    def _field(
        self, cache: dict[str, list[int]], value: str, text: str, index: int | None, path: str
    ) -> list[int]:
        """Encode a checked header field and cache its ids under its value."""
        return _store(cache, value, self._text(text, index, path))

    def _content_type(self, content_type: str, index: int | None) -> list[int]:
        _check_content_type(content_type, index)
        if content_type.startswith(CONSTRAIN):
            rest = content_type[len(CONSTRAIN) :]
            ids = [*_SPACE, st.CONSTRAIN, *self._text(rest, index, "content_type")]
            return _store(self._content_types, content_type, ids)
        return self._field(
            self._content_types, content_type, " " + content_type, index, "content_type"
        )

    def render_message(
        self,
        message: Message,
        has_function_tools: bool,
        typescript: TypeScriptMode = DEFAULT_TYPESCRIPT_MODE,
        index: int | None = None,
    ) -> list[int]:
        out: list[int] = []
        self._emit(out, message, has_function_tools, typescript, index, None)
        return out

    def _emit(
        self,
        out: list[int],
        message: Message,
        has_function_tools: bool,
        typescript: TypeScriptMode,
        index: int | None,
        spans: list[SpanRecord] | None,
    ) -> None:
        """Append one message to ``out``; with ``spans``, also where its parts lie.

        A header is encoded once per distinct set of fields (see :meth:`_new_header`),
        so a repeated one costs one dictionary lookup; the offsets of its parts come
        from the same entry as its ids, so they cannot disagree with them.
        """
        author = message.author
        role = author.role
        key = (role, author.name, message.recipient, message.channel, message.content_type)
        try:
            head = self._headers.get(key)
        except TypeError:  # an unhashable field: say which
            _check_header(message, index)
            raise
        if head is None:
            head = self._new_header(key, message, index)
        start = len(out)
        out += head[0]
        content = message.content
        if len(content) == 1 and type(part := content[0]) is TextContent:
            # The common case, inlined: one text, likely already encoded.
            text = part.text
            ids = self._texts.get(text) if type(text) is str else None
            if ids is None:
                ids = self._new_message_text(text, index, "content[0].text")
            out += ids
        else:
            for j, part in enumerate(content):
                out += self._content(part, role, has_function_tools, typescript, index, j)
        out.append(head[1])
        if spans is not None:
            # The header's part offsets are kept with its entry (see _new_header).
            spans.append((index, start, head[2], len(out)))

    def _new_header(self, key: tuple[object, ...], message: Message, index: int | None) -> _Header:
        """Encode (and check) a header not met before, and cache it by its fields.

        The entry is the ids from ``<|start|>`` to ``<|message|>`` inclusive, the
        token that ends the message, and where the recipient, the channel, the
        content type and ``<|message|>`` begin (for spans).
        """
        marks: list[int] = []
        ids = self._header(message, index, marks)
        ids.append(st.MESSAGE)
        ends_turn = message.author.role is Role.ASSISTANT and message.recipient is not None
        offsets = (marks[0], marks[1], marks[2], len(ids) - 1)  # the last: <|message|>
        return _store(self._headers, key, (ids, st.CALL if ends_turn else st.END, offsets))

    def _content(
        self,
        part: Content,
        role: Role,
        has_ft: bool,
        typescript: TypeScriptMode,
        index: int | None,
        j: int,
    ) -> list[int]:
        if isinstance(part, TextContent):
            return self._message_text(part.text, index, f"content[{j}].text")
        if isinstance(part, (SystemContent, DeveloperContent)):
            system = isinstance(part, SystemContent)
            if role is not (Role.SYSTEM if system else Role.DEVELOPER):
                kind = "System" if system else "Developer"
                raise RenderError(
                    f"{kind}Content may only appear in {kind.lower()} messages, "
                    f"found in {role.value.capitalize()}",
                    message_index=index,
                    path=f"content[{j}]",
                )
            # The functions line lives in the system text only.
            return self._cached_content(part, has_ft and system, typescript, index, j)
        raise RenderError(
            f"cannot render content of type {type(part).__name__}",
            message_index=index,
            path=f"content[{j}]",
        )

    def _cached_content(
        self,
        part: SystemContent | DeveloperContent,
        has_ft: bool,
        typescript: TypeScriptMode,
        index: int | None,
        j: int,
    ) -> list[int]:
        fast = content_key(part, has_ft, typescript)
        if fast is not None:
            # Fields of the usual types: a tuple key (see content_key), already
            # checked for depth.
            key, schemas = fast
            ids = self._contents.get(key)
            if ids is None:
                ids = self._encode_content(part, has_ft, typescript, index, j, key, schemas)
            return ids
        raw = part.to_dict()
        try:
            try:
                value = write_json(raw)
            except RecursionError:
                # Very deep, or a container that holds itself: json.dumps says which.
                value = json.dumps(raw)
        except RecursionError:
            # Far deeper than MAX_NESTING: the check below names where.
            value = None
        except (TypeError, ValueError) as exc:
            raise RenderError(
                f"content is not JSON-serialisable: {exc}",
                message_index=index,
                path=f"content[{j}]",
            ) from None
        json_key = (part.TYPE, has_ft, typescript, value)
        ids = None if value is None else self._contents.get(json_key)
        if ids is None:
            # Checked on a cache miss only: a cached key was checked when it was stored.
            # Nesting cannot exceed the number of brackets in the JSON text.
            brackets = MAX_NESTING + 1 if value is None else value.count("{") + value.count("[")
            deep = too_deep(raw, MAX_NESTING) if brackets > MAX_NESTING else None
            if deep is not None:
                raise RenderError(
                    f"content nests more than {MAX_NESTING} levels deep; flatten the schema "
                    "(the reference refuses such messages too)",
                    message_index=index,
                    path=_short_path(f"content[{j}]{deep}"),
                )
            ids = self._encode_content(part, has_ft, typescript, index, j, json_key, None)
        return ids

    def _encode_content(
        self,
        part: SystemContent | DeveloperContent,
        has_ft: bool,
        typescript: TypeScriptMode,
        index: int | None,
        j: int,
        key: tuple[object, ...],
        schemas: Schemas | None,
    ) -> list[int]:
        """Write and encode a content's text, and cache its ids under ``key``.

        ``schemas`` holds the ``json.dumps`` texts of its tools' parameters, when
        the key was made of them: the schema round trip parses those texts
        instead of writing each schema again.
        """
        to_ts = typescript_converter(typescript)
        if schemas:
            convert = to_ts

            def to_ts(parameters: Any) -> str:
                known = schemas.get(id(parameters))
                if known is not None and known[0] is parameters:
                    return convert(RoundTripped(serde_parse(known[1], parameters)))
                return convert(parameters)

        try:
            if isinstance(part, SystemContent):
                text = system_text(part, has_ft, to_ts)
            else:
                text = developer_text(part, to_ts)
        except RenderError as exc:
            # A converter's own error, with the path of the schema inside the content.
            raise RenderError(
                exc.reason, message_index=index, path=_short_path(f"content[{j}]{exc.path}")
            ) from None
        except (TypeError, ValueError) as exc:
            raise RenderError(
                f"cannot render tool schemas: {exc}", message_index=index, path=f"content[{j}]"
            ) from None
        ids = self._text(text, index, f"content[{j}]")
        return _store(self._contents, key, ids, _CONTENT_CACHE_LIMIT)

    # -- conversations --------------------------------------------------------

    def render_with_spans(
        self,
        conversation: Conversation,
        config: RenderConversationConfig | None,
        mode: RenderMode = "conversation",
        next_turn_role: Role = Role.ASSISTANT,
        drop: Collection[int] | None = None,
    ) -> RenderedConversation:
        """The ids of ``mode``'s render, with where every message and part lies.

        ``drop`` names the messages to leave out instead of the CoT policy's choice
        (the training pipeline's own rules use it).
        """
        check_choice(mode, RENDER_MODES, "render mode")
        spans: list[SpanRecord] = []
        chosen = drop if drop is None or isinstance(drop, frozenset) else frozenset(drop)
        ids, dropped = self.render(conversation, config, mode, next_turn_role, spans, chosen)
        return RenderedConversation(ids, MessageSpans(spans), dropped, mode)

    def render(
        self,
        conversation: Conversation,
        config: RenderConversationConfig | None,
        mode: RenderMode,
        next_turn_role: Role = Role.ASSISTANT,
        spans: list[SpanRecord] | None = None,
        drop: frozenset[int] | None = None,
    ) -> tuple[list[int], frozenset[int]]:
        """The one place a conversation is rendered: every public render comes here."""
        messages = conversation.messages
        has_ft = conversation_has_function_tools(messages)
        if drop is None:
            drop = dropped_indices(messages, resolve_policy(config), training=mode == "training")
        typescript = DEFAULT_TYPESCRIPT_MODE if config is None else config.typescript
        out: list[int] = []
        emit = self._emit
        for i, message in enumerate(messages):
            if i not in drop:
                emit(out, message, has_ft, typescript, i, spans)
        if mode == "completion":
            start = len(out)
            out.append(st.START)
            out += self._piece(Role(next_turn_role).value, None, "next_turn_role")
            if spans is not None:
                at = len(out) - start  # the next turn's header has no later parts
                spans.append((None, start, (at, at, at, at), len(out)))
        elif mode == "training" and messages and out:
            last = messages[-1]
            if last.author.role is Role.ASSISTANT and last.channel == FINAL:
                out[-1] = st.RETURN
        return out, drop


# `<|channel|> json<|message|>` reads back as channel "json" without a content type
# (the reference renders it, and reads it back so too, or refuses it when strict).
_EMPTY_CHANNEL_TYPE: Final = (
    "an empty channel followed by content type {!r} would read back as that channel: "
    "give the message a channel, or write the content type as '<|constrain|>...'"
)

# A header field is one word: whitespace would split it, and "<" would end a
# channel or start (the text of) a special token when the header is parsed back.
_NOT_ONE_WORD: Final = re.compile(r"\s|<")


def _check_header(message: Message, index: int | None) -> None:
    """Refuse header fields the strict parser could not read back as they are.

    Everything harmonia renders must parse back to the same message; the
    reference renders these too, but its parser then fails or misreads them.
    (The renderer checks each field as it first meets it; this checks them all.)
    """
    name = message.author.name
    if name is not None:
        if message.author.role is Role.TOOL:
            _check_tool_name(name, index)
        else:
            _check_word(name, index, "author.name", "author name")
    if message.recipient is not None:
        _check_word(message.recipient, index, "recipient", "recipient")
    if message.channel is not None:
        _check_channel(message.channel, index)
    if message.content_type is not None:
        _check_content_type(message.content_type, index)


def _check_tool_name(name: object, index: int | None) -> None:
    # A tool's name stands where the role does: `assistant` or `user:bob` there
    # reads back as that role, and the strict parser reads only tool names of
    # the `namespace.name` shape (see `_names.is_tool_name`) as tools.
    word = _check_word(name, index, "author.name", "tool name")
    if word.partition(":")[0] in NAMED_ROLES:
        raise RenderError(
            f"a tool named {name!r} would read back as a role: rename the tool",
            message_index=index,
            path="author.name",
        )
    # "tool" alone reads back as a tool author too (the parser's one exception).
    if not is_tool_name(word) and word != "tool":
        raise RenderError(
            f"tool name {name!r} cannot be read back: name a tool `namespace.name` "
            "(ASCII letters, digits, '_' and '-' in each part, e.g. 'functions.get_weather') "
            "or 'python' / 'browser'",
            message_index=index,
            path="author.name",
        )


def _check_content_type(content_type: object, index: int | None) -> None:
    """The content type on its own (without a recipient, only `<|constrain|>X` reads back)."""
    if not isinstance(content_type, str):
        _check_word(content_type, index, "content_type", "content type")
        return
    if content_type.startswith(CONSTRAIN):
        # `<|constrain|> json` reads back as written; a bare marker does not.
        constraint = content_type[len(CONSTRAIN) :].lstrip()
        _check_word(constraint, index, "content_type", "content type constraint")
        return
    _check_word(content_type, index, "content_type", "content type")
    if content_type.startswith("to="):
        raise RenderError(
            f"content type {content_type!r} would read back as a recipient",
            message_index=index,
            path="content_type",
        )


def _check_channel(channel: object, index: int | None) -> None:
    # An empty channel is the one field rendered although it does not read back:
    # the reference renders `<|channel|><|message|>` for it, and rendering stays
    # byte-exact with the reference wherever the reference renders. Its parser,
    # like harmonia's strict parser, then refuses that header (a model that
    # emits it has made an error); harmonia's lenient parser reads it back as
    # channel "" with a diagnostic (except before a plain content type, which
    # _header refuses). Other refusals here are for fields the reference
    # mangles too.
    if channel != "":
        _check_word(channel, index, "channel", "channel")


def _check_word(value: object, index: int | None, path: str, what: str) -> str:
    """``value`` if it is one word (a non-empty string without whitespace or ``<``)."""
    if not isinstance(value, str):
        raise RenderError(
            f"{what} must be a string, not {type(value).__name__}",
            message_index=index,
            path=path,
        )
    if not value or _NOT_ONE_WORD.search(value):
        raise RenderError(
            f"{what} {value!r} cannot be written in a message header: use a non-empty "
            "word without whitespace or '<' (or None to leave it out)",
            message_index=index,
            path=path,
        )
    return value


def conversation_has_function_tools(messages: Sequence[Message]) -> bool:
    """True when some developer content declares a non-empty ``functions`` namespace."""
    # Every message, as the reference looks: a DeveloperContent misplaced in a
    # message that the CoT policy drops still counts. Plain loops: this runs on
    # every render, and a generator costs more per message.
    for m in messages:
        for part in m.content:
            if isinstance(part, DeveloperContent) and has_function_tools(part):
                return True
    return False


def _store(cache: dict[K, V], key: K, value: V, limit: int = _PIECE_CACHE_LIMIT) -> V:
    """Cache ``value``; a full cache is emptied first (what it held is cheap to remake)."""
    if len(cache) >= limit:
        cache.clear()
    cache[key] = value
    return value


def _short_path(path: str, limit: int = 240) -> str:
    """A path cut in the middle when very long (deep schemas give kilobytes of it)."""
    if len(path) <= limit:
        return path
    return path[: limit // 2] + " ... " + path[-limit // 2 :]
