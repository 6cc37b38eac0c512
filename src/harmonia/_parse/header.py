"""Message headers: the text between ``<|start|>`` and ``<|message|>``, as fields.

A header is parsed as a *string* (the reference decodes the header tokens and
works on the text, so a special token and its spelling are the same thing):
``assistant to=functions.f<|channel|>commentary <|constrain|>json`` becomes
role ``assistant``, recipient ``functions.f``, channel ``commentary`` and
content type ``<|constrain|>json``.

Three readers live here, all pure functions (plus :func:`read_header_tokens`,
the strict reading of header *tokens*, cached):

* :func:`parse_header` - the strict reading: the reference's algorithm
  (split the header text at ``<|channel|>``, then read role, recipient and
  content type from its words) with the fixes listed below. It raises
  :class:`HeaderError` carrying the reference's error text.
* :func:`recover_header` - the lenient reading, used by ``strict=False`` when
  the strict reading fails or yields nonsense (special-token text in a field).
  It never raises and reports what it dropped.
* :func:`header_as_text` - the reference's "content mode" for a header that
  never reached ``<|message|>`` (``strict=False``): the channel is taken, the
  rest of the header becomes the message text.

Fixes to the reference in the strict reading. They are tried only when the
reference's reading fails or misreads (special-token text in a field, or a
``role:name`` author read as a tool), so every sensible answer of the reference
is kept, and when they do not help the reference's error is raised:

====  ==============================================  ==================================
 #    header                                          reading
====  ==============================================  ==================================
 F1   ``to=f<|channel|>c <|constrain|> json``         content type ``<|constrain|> json``
                                                      (the reference: leftover error)
 F2   ``<|channel|>final <|constrain|>json``          content type ``<|constrain|>json``,
                                                      no recipient (the reference makes
                                                      ``<|constrain|>json`` the recipient)
 F3   ``user:Bob``, ``assistant:bot to=f``            role and author name, as the
                                                      renderer writes them (the
                                                      reference: unknown role, or a tool
                                                      named ``assistant:bot``)
 F4   ``functions.f``, ``functions.f<|channel|>c``    a tool named ``functions.f``, as
                                                      the renderer writes a tool result
                                                      without recipient (the reference:
                                                      ``Unknown role``)
====  ==============================================  ==================================

What the strict reading refuses that the reference accepts (junk, which
``strict=False`` repairs with a diagnostic):

* an author that is neither a role nor a *tool name*. A tool name is what
  harmonia's tools are called: ``namespace.name`` with ASCII letters, digits,
  ``_`` and ``-`` in each dot-separated part (``functions.get_weather``,
  ``browser.search``, ``container.exec``), or a built-in namespace on its own
  (``python``, ``browser``). The reference makes any first word that is not a
  role a tool's name (``assistantfinal``, ``browser.search=assistant``,
  `` to=foo``); strict mode raises ``Unknown role`` for them.
* a reading with special-token text in a field (``<|start|>user`` as a
  recipient, when the completion repeats the prompt's ``<|start|>``): the
  reference returns it; strict mode raises, and lenient mode reads the header
  after the repeated ``<|start|>`` (``user``).
* an empty channel (``<|channel|><|message|>``), refused like the reference
  (harmonia used to read it as channel ``""``): a model that writes no channel
  has made an error a server should see.

What is *not* changed: a lone word without ``to=`` is a recipient
(``<|channel|>commentary functions.f``), so ``<|channel|>final json`` still
reads as recipient ``json`` (openai/harmony#56). The reference answers that way
and callers depend on it; a content type without a recipient round-trips only
in its ``<|constrain|>`` form.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Final

from .._enums import NAMED_ROLES, Role
from .._message import Author
from .._names import CHANNELS, CONSTRAIN, is_tool_name
from .._tokenizer import special_tokens as st

CHANNEL_MARK: Final = st.SPECIAL_TOKEN_TEXT[st.CHANNEL]

# Rust's char::is_whitespace (the Unicode White_Space property). Python's
# str.isspace() differs (it also accepts U+001C..U+001F), so spell it out.
_RUST_WS: Final = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
# The channel value runs to the first whitespace or '<'.
_CHANNEL_VALUE: Final = re.compile(f"[^{re.escape(_RUST_WS)}<]*")
# Words are split on ASCII whitespace only (Rust's split_ascii_whitespace: not \x0b).
_WORD: Final = re.compile("[^ \t\n\x0c\r]+")
# Whitespace skipped after a channel marker by the lenient reader.
_LEADING_WS: Final = re.compile(f"[{re.escape(_RUST_WS)}]*")
# Special-token spellings other than the two header markers.
_SPECIAL_SPELLING: Final = re.compile(r"<\|[A-Za-z0-9_]+\|>")

_ROLES: Final[dict[str, Role]] = {r.value: r for r in Role}


class HeaderError(Exception):
    """A header the strict reader refuses; ``reason`` is the reference's text."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class MessageHeader:
    """The fields of a parsed header. Immutable, so it can be shared freely."""

    role: Role
    name: str | None = None
    channel: str | None = None
    recipient: str | None = None
    content_type: str | None = None

    @property
    def author(self) -> Author:
        """A fresh :class:`Author` for this header."""
        return Author(self.role, self.name)

    def to_dict(self) -> dict[str, object]:
        """The reference's ``state_data`` shape of a header."""
        author: dict[str, object] = {"role": self.role.value}
        if self.name is not None:
            author["name"] = self.name
        return {
            "author": author,
            "recipient": self.recipient,
            "channel": self.channel,
            "content_type": self.content_type,
        }


# -- shared steps -------------------------------------------------------------


def _trimmed_words(text: str) -> str:
    """``text`` trimmed as Rust trims, with a space before every ``<|constrain|>``.

    The reference spaces the marker so that a content type glued to the
    recipient (``to=f<|constrain|>json``) becomes a word of its own.
    """
    return text.replace(CONSTRAIN, " " + CONSTRAIN).strip(_RUST_WS)


def _take_channel_strict(text: str) -> tuple[str | None, str]:
    """Cut the first ``<|channel|>value`` out of ``text`` (reference step 1)."""
    start = text.find(CHANNEL_MARK)
    if start < 0:
        return None, text
    value_start = start + len(CHANNEL_MARK)
    match = _CHANNEL_VALUE.match(text, value_start)
    assert match is not None  # the pattern matches the empty string
    value_end = match.end()
    if value_end == value_start:
        raise HeaderError("channel marker present but no channel value found in header")
    return text[value_start:value_end], text[:start] + text[value_end:]


def _named_role(word: str) -> tuple[Role, str] | None:
    """F3: ``user:Bob`` -> (USER, "Bob"); ``None`` for anything else."""
    head, colon, name = word.partition(":")
    role = NAMED_ROLES.get(head) if colon else None
    return None if role is None else (role, name)


def _merge_constrain(text: str, spans: list[tuple[int, int]]) -> list[str]:
    """Words of ``text``; a bare ``<|constrain|>`` absorbs the word after it (F1).

    The whitespace between them is kept, so ``<|constrain|> json`` round-trips.
    The reference would read such a pair as recipient ``<|constrain|>`` plus a
    content type (or fail), which is never a meaningful answer.
    """
    words: list[str] = []
    starts: list[int] = []
    for a, b in spans:
        if words and words[-1] == CONSTRAIN and not text.startswith(("to=", CONSTRAIN), a):
            words[-1] = text[starts[-1] : b]
        else:
            words.append(text[a:b])
            starts.append(a)
    return words


def rust_debug(text: str) -> str:
    """``text`` as Rust's ``{:?}`` prints a ``&str`` (quotes included)."""
    return '"' + "".join(map(_debug_char, text)) + '"'


_DEBUG_SIMPLE: Final = {
    "\0": "\\0",
    "\t": "\\t",
    "\r": "\\r",
    "\n": "\\n",
    "\\": "\\\\",
    '"': '\\"',
}
_NOT_PRINTABLE: Final = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})
# Other_Grapheme_Extend (Grapheme_Extend = Mn + Me + these); Rust escapes them.
_OTHER_GRAPHEME_EXTEND: Final = frozenset(
    [
        *(0x09BE, 0x09D7, 0x0B3E, 0x0B57, 0x0BBE, 0x0BD7, 0x0CC2, 0x0CD5, 0x0CD6, 0x0D3E),
        *(0x0D57, 0x0DCF, 0x0DDF, 0x1B35, 0x200C, 0x302E, 0x302F, 0xFF9E, 0xFF9F),
        *(0x1133E, 0x11357, 0x114B0, 0x114BD, 0x115AF, 0x11930, 0x1D165),
        *range(0x1D16E, 0x1D173),
        *range(0xE0020, 0xE0080),
    ]
)


def _debug_char(ch: str) -> str:
    simple = _DEBUG_SIMPLE.get(ch)
    if simple is not None:
        return simple
    if " " <= ch <= "~":
        return ch
    category = unicodedata.category(ch)
    if (
        (category in _NOT_PRINTABLE and ch != " ")
        or category in ("Mn", "Me")
        or ord(ch) in _OTHER_GRAPHEME_EXTEND
    ):
        return f"\\u{{{ord(ch):x}}}"
    return ch


# -- the strict reader ----------------------------------------------------------


def parse_header(text: str, role: Role | None) -> MessageHeader:
    """Read a header the way the reference does, with fixes F1-F4, refusing junk
    (see the module docstring); raises :class:`HeaderError`.

    ``role`` is the role already known from the prompt (the completion of a
    prompt ending in ``<|start|>assistant``), or ``None`` when the header
    starts with its role.

    >>> parse_header("<|channel|>commentary to=functions.f <|constrain|>json", Role.ASSISTANT)
    MessageHeader(role=<Role.ASSISTANT: 'assistant'>, name=None, channel='commentary', \
recipient='functions.f', content_type='<|constrain|>json')
    >>> parse_header("functions.f to=assistant<|channel|>commentary", None).name
    'functions.f'
    """
    try:
        header = _read(text, role, fixes=False)
    except HeaderError:
        fixed = _fixed(text, role)
        if fixed is None:
            raise
        return fixed
    if _misread(header):
        fixed = _fixed(text, role)
        if fixed is not None:
            return fixed
    if is_nonsense(header):
        raise HeaderError(_nonsense_reason(header))
    return header


def _fixed(text: str, role: Role | None) -> MessageHeader | None:
    """The reading with fixes F1-F4, when it succeeds and is no nonsense."""
    try:
        fixed = _read(text, role, fixes=True)
    except HeaderError:
        return None
    return None if is_nonsense(fixed) else fixed


def _nonsense_reason(header: MessageHeader) -> str:
    """Why :func:`is_nonsense` refused ``header``: the first field holding ``<|``."""
    fields = ("name", "channel", "recipient", "content_type")
    field, value = next((f, v) for f in fields if "<|" in (v := getattr(header, f) or ""))
    return (
        f"special token in the message header's {field}: {value!r} (a header holds "
        "no special token but <|channel|> and <|constrain|>; use strict=False to "
        "repair it)"
    )


_HEADER_CACHE: dict[tuple[tuple[int, ...], Role | None], MessageHeader | str] = {}
_HEADER_CACHE_LIMIT: Final = 4096


def read_header_tokens(table: list[bytes], tokens: list[int], role: Role | None) -> MessageHeader:
    """:func:`parse_header` of header tokens (cached: headers repeat). Raises HeaderError.

    Tokens that are not in ``table`` (negative ids included) or bytes that are
    not UTF-8 make the reference's "could not decode header".
    """
    key = (tuple(tokens), role)
    hit = _HEADER_CACHE.get(key)
    if hit is None:
        try:
            if tokens and min(tokens) < 0:
                raise IndexError("negative token id")
            text = b"".join([table[t] for t in tokens]).decode()
        except (IndexError, TypeError, UnicodeDecodeError):
            hit = "could not decode header"
        else:
            try:
                hit = parse_header(text, role)
            except HeaderError as exc:
                hit = exc.reason
        if len(_HEADER_CACHE) >= _HEADER_CACHE_LIMIT:
            _HEADER_CACHE.clear()
        _HEADER_CACHE[key] = hit
    if isinstance(hit, str):
        raise HeaderError(hit)
    return hit


def _misread(header: MessageHeader) -> bool:
    # Special-token text in a field, or a ``role:name`` author read as a tool.
    return is_nonsense(header) or (
        header.role is Role.TOOL
        and header.name is not None
        and _named_role(header.name) is not None
    )


def _read(text: str, role: Role | None, *, fixes: bool) -> MessageHeader:
    """The reference's header algorithm (see the module docstring); ``fixes`` adds F1-F4."""
    channel, rest = _take_channel_strict(text)
    rest = _trimmed_words(rest)
    spans = [m.span() for m in _WORD.finditer(rest)]
    name: str | None = None
    if role is None:
        if not spans:
            raise HeaderError("message header did not contain a role")
        first = rest[spans[0][0] : spans[0][1]]
        role, name, consumed = _role_of(first, len(spans), fixes)
        if consumed:
            del spans[0]
    if spans and rest[spans[0][0] : spans[0][1]] == role.value:
        del spans[0]
    words = _merge_constrain(rest, spans) if fixes else [rest[a:b] for a, b in spans]
    recipient, content_type = _recipient_and_type(words, fixes)
    _check_author(role, name)
    return MessageHeader(role, name, channel, recipient, content_type)


def _role_of(word: str, n_words: int, fixes: bool) -> tuple[Role, str | None, bool]:
    """Role, author name, and whether ``word`` was used up, for a header's first word."""
    role = _ROLES.get(word)
    if role is not None:
        # Removed by the caller's "drop the role word" step; a literal ``tool``
        # is a tool named "tool", as in the reference.
        return role, ("tool" if role is Role.TOOL else None), False
    named = _named_role(word) if fixes else None
    if named is not None:
        return named[0], named[1], True
    if n_words > 1 or word.startswith("to=") or (fixes and "<|" not in word):
        # An unknown first word names a tool (``functions.f to=assistant``).
        # The reference requires more words after it; a lone one (F4) is what
        # the renderer writes for a tool result without recipient or channel.
        # (The caller refuses one that is no tool's name: _check_author.)
        return Role.TOOL, word, True
    raise HeaderError(f"Unknown role: {word}")


def _check_author(role: Role, name: str | None) -> None:
    """Refuse a tool author whose name is no tool name (the reference takes any word)."""
    if role is Role.TOOL and name is not None and name != "tool" and not is_tool_name(name):
        raise HeaderError(
            f"Unknown role: {name} (not a role, nor a tool name such as "
            "functions.get_weather or python)"
        )


def _recipient_and_type(words: list[str], fixes: bool) -> tuple[str | None, str | None]:
    """Reference step 6 on the words after the role (F2 for a lone content type)."""
    if not words:
        return None, None
    n = len(words)
    last = words.pop()
    recipient: str | None = None
    content_type: str | None = None
    if last.startswith("to="):
        recipient = last[3:]
    elif n == 1:
        if fixes and last.startswith(CONSTRAIN):
            content_type = last  # F2
        else:
            recipient = last
    else:
        content_type = last
        before = words.pop()
        recipient = before[3:] if before.startswith("to=") else before
    if words:
        leftover = " ".join(words)
        raise HeaderError(
            f"unexpected tokens remaining in message header: Some({rust_debug(leftover)})"
        )
    return recipient, content_type


def is_nonsense(header: MessageHeader) -> bool:
    """True when a field holds special-token text: a misreading, not an answer."""
    for value in (header.name, header.channel, header.recipient):
        if value is not None and "<|" in value:
            return True
    # A content type may start with the <|constrain|> marker (and then holds
    # whatever the model wrote after it).
    ct = header.content_type
    return ct is not None and "<|" in ct and not ct.startswith(CONSTRAIN)


# -- the lenient reader ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Recovery:
    """What :func:`recover_header` did: the parts it dropped and why."""

    dropped: tuple[str, ...]
    notes: tuple[str, ...]
    #: the header word read as a role and a channel run together (``assistantanalysis``)
    glued: str | None = None


def recover_header(
    text: str, role: Role | None, default_role: Role
) -> tuple[MessageHeader, Recovery]:
    """Read any header, never failing; for ``strict=False``.

    Stray special tokens are removed, the last ``<|channel|>`` wins, ``to=`` words
    give the recipient, a ``<|constrain|>`` word the content type, other words
    fill the remaining field in the reference's order and extra words are dropped.
    A header without a usable role gets ``default_role``.

    >>> h, r = recover_header("<|channel|>commentary<|channel|>analysis", Role.ASSISTANT,
    ...                       Role.ASSISTANT)
    >>> h.channel, r.dropped
    ('analysis', ('<|channel|>commentary',))
    """
    dropped: list[str] = []
    notes: list[str] = []
    text = _drop_stray_specials(text, dropped, notes)
    channel, text = _take_channel_lenient(text, dropped, notes)
    text = _trimmed_words(text)
    spans = [m.span() for m in _WORD.finditer(text)]
    name: str | None = None
    first = text[spans[0][0] : spans[0][1]] if spans else ""
    glued: str | None = None
    if role is None:
        role, name, channel = _recover_role(text, spans, default_role, channel, dropped, notes)
        if notes and notes[-1].startswith(_GLUED_NOTE):
            glued = first
    elif channel is None and first.startswith(role.value) and first[len(role.value) :] in CHANNELS:
        # The role given, then ``assistantanalysis``: the prompt's role repeated
        # with the channel run into it (``<|channel|>`` lost), never a recipient.
        channel, glued = first[len(role.value) :], first
        notes.append(f"{_GLUED_NOTE} {first!r}")
        del spans[0]
    if spans and text[spans[0][0] : spans[0][1]] == role.value:
        del spans[0]
    words = _merge_constrain(text, spans)
    recipient, content_type = _recover_fields(words, dropped, notes)
    return MessageHeader(role, name, channel, recipient, content_type), Recovery(
        tuple(dropped), tuple(notes), glued
    )


_GLUED_NOTE: Final = "role and channel run together in"


def glued_role_channel(header: MessageHeader, role: Role | None) -> bool:
    """A header read with ``role`` given whose lone recipient is that role and a
    channel run together (``assistantanalysis``): strict mode's reading, which
    lenient mode replaces with the role and channel."""
    word = header.recipient
    return (
        role is not None
        and word is not None
        and header.channel is None
        and header.content_type is None
        and word.startswith(role.value)
        and word[len(role.value) :] in CHANNELS
    )


def _drop_stray_specials(text: str, dropped: list[str], notes: list[str]) -> str:
    def replace(match: re.Match[str]) -> str:
        spelling = match.group()
        if spelling in (CHANNEL_MARK, CONSTRAIN) or spelling not in st.SPECIAL_TOKENS:
            return spelling
        dropped.append(spelling)
        return " "  # a separator: ``to=f<|endoftext|>json`` keeps two words

    if "<|" not in text:
        return text
    out = _SPECIAL_SPELLING.sub(replace, text)
    if out != text:
        notes.append("removed special tokens that have no place in a header")
    return out


def _take_channel_lenient(
    text: str, dropped: list[str], notes: list[str]
) -> tuple[str | None, str]:
    """Cut out every ``<|channel|>`` marker; the last non-empty value is the channel.

    gpt-oss-20b sometimes writes ``<|channel|>commentary<|channel|>analysis``;
    the later channel is the one the message is written in.
    """
    values: list[tuple[int, int, str]] = []  # (marker start, value end, value)
    pos = text.find(CHANNEL_MARK)
    while pos >= 0:
        ws = _LEADING_WS.match(text, pos + len(CHANNEL_MARK))
        assert ws is not None
        value = _CHANNEL_VALUE.match(text, ws.end())
        assert value is not None
        values.append((pos, value.end(), value.group()))
        pos = text.find(CHANNEL_MARK, value.end())
    if not values:
        return None, text
    chosen = next((i for i in range(len(values) - 1, -1, -1) if values[i][2]), len(values) - 1)
    dropped += [text[start:end] for i, (start, end, _) in enumerate(values) if i != chosen]
    # Each marker and its value becomes one space.
    ends = [0, *(end for _, end, _ in values)]
    kept = [text[prev:start] for prev, (start, _, _) in zip(ends, values, strict=False)]
    channel = values[chosen][2]
    if len(values) > 1:
        notes.append(f"{len(values)} channel markers; kept the channel {channel!r}")
    elif not channel:
        notes.append("channel marker without a value")
    return channel, " ".join([*kept, text[ends[-1] :]])


def _recover_role(
    text: str,
    spans: list[tuple[int, int]],
    default_role: Role,
    channel: str | None,
    dropped: list[str],
    notes: list[str],
) -> tuple[Role, str | None, str | None]:
    """Role, author name and channel of a header whose first word should be its author."""
    first = text[spans[0][0] : spans[0][1]] if spans else ""
    if not first or first.startswith(("to=", CONSTRAIN)):
        # No author word (such a word is a recipient or a content type: it stays).
        notes.append(f"header has no role; assumed {default_role.value!r}")
        return default_role, None, channel
    try:
        role, name, consumed = _role_of(first, len(spans), True)
        _check_author(role, name)
    except HeaderError:
        pass
    else:
        if consumed:
            del spans[0]
        return role, name, channel
    del spans[0]
    for glued in _GLUED_ROLES:
        if first.startswith(glued.value):
            # ``assistantfinal``: the role and the channel run together (what
            # is left when the special tokens between them are lost).
            rest = first[len(glued.value) :]
            if rest in CHANNELS and not channel:
                notes.append(f"{_GLUED_NOTE} {first!r}")
                return glued, None, rest
            notes.append(f"unknown author {first!r}; read as {glued.value!r}")
            dropped.append(first)
            return glued, None, channel
    notes.append(
        f"unknown author {first!r} (neither a role nor a tool name); assumed {default_role.value!r}"
    )
    dropped.append(first)
    return default_role, None, channel


# Roles a junk first word may start with (a tool is written as its name).
_GLUED_ROLES: Final = tuple(NAMED_ROLES.values())


def _recover_fields(
    words: list[str], dropped: list[str], notes: list[str]
) -> tuple[str | None, str | None]:
    try:
        return _recipient_and_type(list(words), True)
    except HeaderError:
        pass
    recipient: str | None = None
    content_type: str | None = None
    bare: list[str] = []
    for word in words:
        if word.startswith("to=") and len(word) > 3:
            if recipient is not None:
                dropped.append("to=" + recipient)
            recipient = word[3:]
        elif word.startswith(CONSTRAIN):
            if content_type is not None:
                dropped.append(content_type)
            content_type = word
        else:
            bare.append(word)
    if recipient is None and content_type is None and len(bare) >= 2:
        content_type = bare.pop()
        recipient = bare.pop()
    elif recipient is None and bare:
        recipient = bare.pop()
    elif content_type is None and bare:
        content_type = bare.pop()
    dropped.extend(bare)
    notes.append("dropped extra words from the header")
    return recipient, content_type


# -- content mode -----------------------------------------------------------------


def header_as_text(
    text: str, role: Role | None, default_role: Role
) -> tuple[Role, str | None, str | None, str, tuple[str, ...]]:
    """A header that never reached ``<|message|>``: (role, name, channel, text, dropped).

    This is the reference's ``strict=False`` recovery (a refusal the model wrote
    without a header: ``I must refuse<|end|>``): the first ``<|channel|>`` gives
    the channel, a leading role word is dropped, and the remaining words joined
    by single spaces are the text; ``to=`` and content types are *not* extracted.
    With ``role=None`` (a harmonia extension) a leading role word sets the role,
    otherwise ``default_role`` is used and the word stays in the text. When the
    channel markers are damaged (``<|channel|> x<|channel|>final``), the last
    channel wins and ``dropped`` lists the other markers with their words, so
    that no text is lost.

    >>> header_as_text("<|channel|>commentary to=functions.f {}", Role.ASSISTANT, Role.ASSISTANT)
    (<Role.ASSISTANT: 'assistant'>, None, 'commentary', 'to=functions.f {}', ())
    """
    dropped: list[str] = []
    try:
        channel, rest = _take_channel_strict(text)
    except HeaderError:
        channel, rest = _take_channel_lenient(text, dropped, [])
    rest = _trimmed_words(rest)
    words = _WORD.findall(rest)
    name: str | None = None
    if role is None:
        role = default_role
        if words:
            exact = _ROLES.get(words[0])
            named = _named_role(words[0])
            if exact is not None and exact is not Role.TOOL:
                role = exact
            elif named is not None:
                role, name = named
                del words[0]
    if words and words[0] == role.value:
        del words[0]
    return role, name, channel, " ".join(words), tuple(dropped)
