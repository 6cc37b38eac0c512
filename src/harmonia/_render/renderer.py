"""Messages and conversations to token ids, byte-exact with the reference.

A message is not rendered as one string: each header piece and each content part
is encoded on its own (the reference does, and the ids differ when text runs
together), and format tokens are appended by id. System and developer texts are
expensive (tools, TypeScript), so their encodings are cached by *value*: the key
is the content's JSON, so a later change to the object can never hit a stale entry.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from typing import Any, Final

from .._content import Content, DeveloperContent, SystemContent, TextContent
from .._enums import Role
from .._errors import InputError, RenderError
from .._message import DEFAULT_TYPESCRIPT_MODE, Conversation, Message, RenderConversationConfig
from .._names import CONSTRAIN, FINAL, TYPESCRIPT_MODES, TypeScriptMode
from .._tokenizer import Tokenizer
from .._tokenizer import special_tokens as st
from .cot import dropped_indices, resolve_policy
from .prompt_text import developer_text, has_function_tools, system_text
from .spans import RENDER_MODES, MessageSpan, RenderedConversation, RenderMode

TYPESCRIPT_REFERENCE: Final[TypeScriptMode] = "reference"
TYPESCRIPT_CORRECTED: Final[TypeScriptMode] = "corrected"

_PIECE_CACHE_LIMIT: Final = 8192
_CONTENT_CACHE_LIMIT: Final = 512
# Message texts repeat: a chat server re-renders the whole history every turn.
# Texts up to this long are cached, until the cached texts total _TEXT_CACHE_CHARS.
_CACHED_TEXT_CHARS: Final = 4096
_TEXT_CACHE_CHARS: Final = 1 << 20
_SPACE: Final = [220]  # " "
# MessageSpan(*fields) goes through the NamedTuple's keyword-aware __new__; this is
# the same object built at tuple speed (one per rendered message).
_new_span: Final = tuple.__new__


def typescript_converter(mode: TypeScriptMode) -> Callable[[Any], str]:
    """The schema-to-TypeScript function of a mode (imported on first use)."""
    if mode == TYPESCRIPT_REFERENCE:
        from .typescript import schema_to_typescript

        return schema_to_typescript
    if mode == TYPESCRIPT_CORRECTED:
        from .typescript import schema_to_typescript_corrected

        return schema_to_typescript_corrected
    raise RenderError(
        f"unknown typescript mode {mode!r}: choose one of {', '.join(map(repr, TYPESCRIPT_MODES))}"
    )


class Renderer:
    """Renders with one tokenizer. Safe to share: caches are value-keyed and only grow."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._encode = tokenizer.engine.encode_ordinary
        self._pieces: dict[str, list[int]] = {}
        self._contents: dict[tuple[object, ...], list[int]] = {}
        self._texts: dict[str, list[int]] = {}
        self._texts_size = 0  # characters held by _texts

    def clear_caches(self) -> None:
        """Forget every cached encoding (the benchmark uses this to time cold renders)."""
        self._pieces.clear()
        self._contents.clear()
        self._texts.clear()
        self._texts_size = 0

    # -- encoding helpers -----------------------------------------------------

    def _text(self, text: str, index: int | None, path: str) -> list[int]:
        if not text:
            return []
        try:
            return self._encode(text)
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
            ids = self._text(text, index, path)
            if len(self._pieces) >= _PIECE_CACHE_LIMIT:
                self._pieces.clear()
            self._pieces[text] = ids
        return ids

    # -- one message ----------------------------------------------------------

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
        spans: list[MessageSpan] | None,
    ) -> None:
        """Append one message to ``out``; with ``spans``, also where its parts lie.

        The offsets are taken while the parts are written, so they cannot disagree
        with the ids; without ``spans`` the only extra cost is four ``is None`` tests.
        """
        author = message.author
        role = author.role
        start = len(out)
        out.append(st.START)
        if role is Role.TOOL:
            if author.name is None:
                raise RenderError(
                    "Tools should have a name!", message_index=index, path="author.name"
                )
            out += self._piece(author.name, index, "author.name")
        else:
            out += self._piece(role.value, index, "author.role")
            if author.name is not None:
                out += self._piece(":" + author.name, index, "author.name")
        if spans is not None:
            at_recipient = len(out)
        recipient = message.recipient
        if recipient is not None and recipient != "all":
            out += self._piece(" to=" + recipient, index, "recipient")
        if spans is not None:
            at_channel = len(out)
        if message.channel is not None:
            out.append(st.CHANNEL)
            out += self._piece(message.channel, index, "channel")
        if spans is not None:
            at_type = len(out)
        content_type = message.content_type
        if content_type is not None:
            if content_type.startswith(CONSTRAIN):
                out += _SPACE
                out.append(st.CONSTRAIN)
                out += self._piece(content_type[len(CONSTRAIN) :], index, "content_type")
            else:
                out += self._piece(" " + content_type, index, "content_type")
        if spans is not None:
            at_message = len(out)
        out.append(st.MESSAGE)
        for j, part in enumerate(message.content):
            out += self._content(part, role, has_function_tools, typescript, index, j)
        out.append(st.CALL if role is Role.ASSISTANT and recipient is not None else st.END)
        if spans is not None:
            end = len(out) - 1
            record = (index, start, at_recipient, at_channel, at_type, at_message, end, end + 1)
            spans.append(_new_span(MessageSpan, record))

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
        if isinstance(part, SystemContent):
            if role is not Role.SYSTEM:
                raise RenderError(
                    "SystemContent may only appear in system messages, "
                    f"found in {_rust_role(role)}",
                    message_index=index,
                    path=f"content[{j}]",
                )
            return self._cached_content(part, has_ft, typescript, index, j)
        if isinstance(part, DeveloperContent):
            if role is not Role.DEVELOPER:
                raise RenderError(
                    "DeveloperContent may only appear in developer messages, "
                    f"found in {_rust_role(role)}",
                    message_index=index,
                    path=f"content[{j}]",
                )
            # The functions line lives in the system text only.
            return self._cached_content(part, False, typescript, index, j)
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
        try:
            value = json.dumps(part.to_dict())
        except (TypeError, ValueError) as exc:
            raise RenderError(
                f"content is not JSON-serialisable: {exc}",
                message_index=index,
                path=f"content[{j}]",
            ) from None
        key = (part.TYPE, has_ft, typescript, value)
        ids = self._contents.get(key)
        if ids is None:
            to_ts = typescript_converter(typescript)
            try:
                if isinstance(part, SystemContent):
                    text = system_text(part, has_ft, to_ts)
                else:
                    text = developer_text(part, to_ts)
            except (TypeError, ValueError) as exc:
                raise RenderError(
                    f"cannot render tool schemas: {exc}", message_index=index, path=f"content[{j}]"
                ) from None
            ids = self._text(text, index, f"content[{j}]")
            if len(self._contents) >= _CONTENT_CACHE_LIMIT:
                self._contents.clear()
            self._contents[key] = ids
        return ids

    # -- conversations --------------------------------------------------------

    def render_conversation(
        self, conversation: Conversation, config: RenderConversationConfig | None
    ) -> list[int]:
        return self._render(conversation, config, "conversation", Role.ASSISTANT, None)[0]

    def render_for_completion(
        self,
        conversation: Conversation,
        next_turn_role: Role,
        config: RenderConversationConfig | None,
    ) -> list[int]:
        return self._render(conversation, config, "completion", next_turn_role, None)[0]

    def render_for_training(
        self, conversation: Conversation, config: RenderConversationConfig | None
    ) -> list[int]:
        return self._render(conversation, config, "training", Role.ASSISTANT, None)[0]

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
        if mode not in RENDER_MODES:
            raise InputError(
                f"unknown render mode {mode!r}: choose one of {', '.join(RENDER_MODES)}"
            )
        spans: list[MessageSpan] = []
        chosen = drop if drop is None or isinstance(drop, frozenset) else frozenset(drop)
        ids, dropped = self._render(conversation, config, mode, next_turn_role, spans, chosen)
        return RenderedConversation(ids, tuple(spans), dropped, mode)

    def _render(
        self,
        conversation: Conversation,
        config: RenderConversationConfig | None,
        mode: RenderMode,
        next_turn_role: Role,
        spans: list[MessageSpan] | None,
        drop: frozenset[int] | None = None,
    ) -> tuple[list[int], frozenset[int]]:
        """The one place a conversation is rendered: every public render comes here."""
        messages = conversation.messages
        has_ft = conversation_has_function_tools(messages)
        if drop is None:
            drop = dropped_indices(messages, resolve_policy(config))
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
                end = len(out)
                spans.append(MessageSpan(None, start, end, end, end, end, end, end))
        elif mode == "training" and messages and out:
            last = messages[-1]
            if last.author.role is Role.ASSISTANT and last.channel == FINAL:
                out[-1] = st.RETURN
        return out, drop


def conversation_has_function_tools(messages: Sequence[Message]) -> bool:
    """True when some developer content declares a non-empty ``functions`` namespace."""
    return any(
        isinstance(part, DeveloperContent) and has_function_tools(part)
        for m in messages
        for part in m.content
    )


def _rust_role(role: Role) -> str:
    return role.value.capitalize()
