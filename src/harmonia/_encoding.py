"""``HarmonyEncoding`` and ``load_harmony_encoding``: the public entry points.

This module sits on top: it wires the tokenizer, the renderer and the parser
together (those never import each other).
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Sequence

from ._enums import HarmonyEncodingName, Role
from ._errors import InputError
from ._message import Conversation, Message, RenderConversationConfig, RenderOptions
from ._names import EngineName
from ._parse import ParseResult, parse_completion
from ._render import RenderedConversation, Renderer, RenderMode
from ._tokenizer import SPECIAL_TOKENS_SET, SpecialSet, Tokenizer, get_engine, get_tokenizer
from ._tokenizer import special_tokens as st


class HarmonyEncoding:
    """The o200k_harmony tokenizer plus harmony rendering and parsing.

    Obtain one with :func:`load_harmony_encoding`; it is immutable and thread-safe.

    >>> enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    >>> enc.encode("hello world")
    [24912, 2375]
    >>> conv = Conversation.from_messages([Message.from_role_and_content(Role.USER, "Hi")])
    >>> enc.decode_utf8(enc.render_conversation_for_completion(conv, Role.ASSISTANT))
    '<|start|>user<|message|>Hi<|end|><|start|>assistant'
    """

    def __init__(self, name: str, tokenizer: Tokenizer) -> None:
        self._name = name
        self._tokenizer = tokenizer
        self._renderer = Renderer(tokenizer)

    def __repr__(self) -> str:
        return f"<HarmonyEncoding {self._name} engine={self._tokenizer.engine.name}>"

    @property
    def name(self) -> str:
        return self._name

    @property
    def tokenizer_name(self) -> str:
        return "o200k_harmony"

    @property
    def tokenizer(self) -> Tokenizer:
        return self._tokenizer

    @property
    def special_tokens_set(self) -> frozenset[str]:
        """The text of every special token (immutable)."""
        return SPECIAL_TOKENS_SET

    # -- rendering ------------------------------------------------------------

    def render_conversation_for_completion(
        self,
        conversation: Conversation,
        next_turn_role: Role,
        config: RenderConversationConfig | None = None,
    ) -> list[int]:
        """The prompt: the conversation, then ``<|start|>`` and the next role."""
        return self._renderer.render(conversation, config, "completion", next_turn_role)[0]

    def render_conversation(
        self, conversation: Conversation, config: RenderConversationConfig | None = None
    ) -> list[int]:
        """The conversation's messages, with the CoT policy applied."""
        return self._renderer.render(conversation, config, "conversation")[0]

    def render_conversation_for_training(
        self, conversation: Conversation, config: RenderConversationConfig | None = None
    ) -> list[int]:
        """As :meth:`render_conversation`, ending a final answer with ``<|return|>``."""
        return self._renderer.render(conversation, config, "training")[0]

    def render_with_spans(
        self,
        conversation: Conversation,
        config: RenderConversationConfig | None = None,
        *,
        mode: RenderMode = "conversation",
        next_turn_role: Role = Role.ASSISTANT,
        drop: Collection[int] | None = None,
    ) -> RenderedConversation:
        """Render as ``mode`` does (``"conversation"``, ``"completion"`` or
        ``"training"``: the same ids as the matching ``render_conversation*``
        method) and say which message and part produced every token. ``drop``
        (indices) replaces the CoT policy's choice of messages to leave out.

        >>> enc = load_harmony_encoding("HarmonyGptOss")
        >>> conv = Conversation.from_messages([
        ...     Message.from_role_and_content(Role.USER, "Hi"),
        ...     Message.from_role_and_content(Role.ASSISTANT, "Hello").with_channel("final"),
        ... ])
        >>> rendered = enc.render_with_spans(conv, mode="training")
        >>> [(s.message_index, enc.decode_utf8(rendered.ids[s.message + 1 : s.end]))
        ...  for s in rendered.spans]
        [(0, 'Hi'), (1, 'Hello')]
        >>> last = rendered.spans[1]
        >>> [(p, enc.decode_utf8(rendered.ids[a:b])) for p, a, b in last.parts() if a < b]
        ... # doctest: +NORMALIZE_WHITESPACE
        [('start', '<|start|>'), ('role', 'assistant'), ('channel', '<|channel|>final'),
         ('message', '<|message|>'), ('body', 'Hello'), ('terminator', '<|return|>')]
        """
        return self._renderer.render_with_spans(conversation, config, mode, next_turn_role, drop)

    def render(self, message: Message, render_options: RenderOptions | None = None) -> list[int]:
        """One message, with no CoT dropping."""
        options = render_options or RenderOptions()
        return self._renderer.render_message(
            message, options.conversation_has_function_tools, options.typescript
        )

    # -- parsing --------------------------------------------------------------

    def parse_messages_from_completion_tokens(
        self, tokens: Iterable[int], role: Role | None = None, *, strict: bool = True
    ) -> list[Message]:
        """Parse a completion into messages (see :class:`StreamableParser`)."""
        return parse_completion(self, tokens, role, strict=strict).messages

    def parse_completion(
        self, completion: Iterable[int] | str, role: Role | None = None, *, strict: bool = True
    ) -> ParseResult:
        """Parse token ids, or text with special tokens spelled out, into messages
        and the lenient parser's diagnostics (a harmonia extension).

        >>> enc = load_harmony_encoding("HarmonyGptOss")
        >>> result = enc.parse_completion("<|channel|>final<|message|>Hi<|end|>junk",
        ...                               Role.ASSISTANT, strict=False)
        >>> [m.text for m in result.messages], [d.kind.value for d in result.diagnostics]
        (['Hi'], ['junk-between-messages'])
        """
        return parse_completion(self, completion, role, strict=strict)

    # -- tokenizer ------------------------------------------------------------

    def encode(
        self,
        text: str,
        *,
        allowed_special: SpecialSet = frozenset(),
        disallowed_special: SpecialSet = "all",
    ) -> list[int]:
        """Encode text; special-token text raises unless listed in ``allowed_special``."""
        return self._tokenizer.encode(
            text, allowed_special=allowed_special, disallowed_special=disallowed_special
        )

    def encode_ordinary(self, text: str) -> list[int]:
        """Encode text with every special-token spelling treated as plain text."""
        return self._tokenizer.encode_ordinary(text)

    def decode_utf8(self, tokens: Sequence[int]) -> str:
        """Decode strictly: unknown ids and invalid UTF-8 raise ``DecodeError``."""
        return self._tokenizer.decode_utf8(tokens)

    def decode(self, tokens: Sequence[int], errors: str = "replace") -> str:
        """Decode, replacing invalid UTF-8 (``errors`` as in ``bytes.decode``)."""
        return self._tokenizer.decode(tokens, errors)

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        """The raw bytes of the tokens."""
        return self._tokenizer.decode_bytes(tokens)

    def is_special_token(self, token: int) -> bool:
        return st.is_special_token(token)

    def stop_tokens(self) -> list[int]:
        """``<|return|>``, ``<|end|>``, ``<|call|>`` (sorted; the reference's order is random)."""
        return sorted(st.STOP_TOKENS)

    def stop_tokens_for_assistant_actions(self) -> list[int]:
        """``<|return|>`` and ``<|call|>``."""
        return sorted(st.STOP_TOKENS_FOR_ASSISTANT_ACTIONS)


_encodings: dict[tuple[str, str], HarmonyEncoding] = {}
_lock = threading.Lock()


def load_harmony_encoding(
    name: str | HarmonyEncodingName, *, engine: EngineName | None = None
) -> HarmonyEncoding:
    """Load an encoding (once per process; later calls return the same object).

    ``engine`` picks the BPE engine (every engine gives the same ids):

    * ``"auto"`` (the default): ready in about a tenth of a second, encodes in pure
      Python, and switches to quicktok once the process has spent about as long
      encoding as building quicktok takes (half a second);
    * ``"quicktok"``: builds quicktok's tables now, the fastest from the first call;
    * ``"python"``: pure Python only;
    * ``"tiktoken"``: tiktoken built from the same ranks (``harmonia[tiktoken]``).

    The ``HARMONIA_BPE_ENGINE`` environment variable sets the default. Nothing is
    ever downloaded.
    """
    value = str(name)
    if value != HarmonyEncodingName.HARMONY_GPT_OSS.value:
        raise InputError(f"Invalid HarmonyEncodingName: {value}")
    bpe = get_engine(engine)
    key = (value, bpe.name)
    encoding = _encodings.get(key)
    if encoding is None:
        tokenizer = get_tokenizer(bpe.name)
        with _lock:
            encoding = _encodings.get(key)
            if encoding is None:
                encoding = _encodings[key] = HarmonyEncoding(value, tokenizer)
    return encoding
