"""Allowed-token masks for one assistant turn, backed by llguidance.

:class:`TurnMatcher` compiles a turn grammar (:mod:`._grammar`) against the
o200k_harmony vocabulary and follows the model token by token: feed it each
sampled token, ask it for the bitmask of the tokens allowed next. The bitmask is
llguidance's layout: ``int32`` words, bit ``i % 32`` of word ``i // 32`` set when
token ``i`` is allowed, one bit for each of the 201,089 ids.

llguidance is an optional dependency (the ``constrained`` extra);
it is imported on first use, so ``import harmonia`` never needs it.

The llguidance tokenizer is built once per process from harmonia's own id ->
bytes table, so every id is listed exactly once (tiktoken's o200k_harmony has two
names for id 200018) and the 1,091 special ids are declared special: llguidance
keeps them apart from text, which is why text spelling ``<|end|>`` is content
and only the id 200007 ends a message.
"""

from __future__ import annotations

import copy
import importlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, NoReturn, TypeVar

import numpy as np
from numpy.typing import NDArray

from .._errors import HarmonyError, InputError, ModelOutputError, install_hint
from .._message import Conversation
from .._tokenizer import Tokenizer, get_tokenizer
from .._tokenizer import special_tokens as st
from ._grammar import GrammarOptions, JsonSlot, compile_turn
from ._keys import KeyGuard, tables

if TYPE_CHECKING:
    import llguidance

#: Number of ids the masks cover (0 ..= 201088).
VOCAB_SIZE: Final = st.N_VOCAB
#: Number of int32 words in a mask.
MASK_WORDS: Final = (VOCAB_SIZE + 31) // 32
#: The special tokens a turn may contain; a mask never allows any other special token.
HARMONY_SPECIAL_TOKENS: Final = st.STOP_TOKENS | {st.START, st.CHANNEL, st.CONSTRAIN, st.MESSAGE}

_TEMPLATE_CACHE_LIMIT: Final = 32
T = TypeVar("T")


class ConstrainedUnavailableError(HarmonyError, ImportError):
    """llguidance is not installed (the ``constrained`` extra)."""


def _special_keep_words() -> NDArray[np.int32]:
    """The mask words from the first special id on, with only harmony's specials set."""
    first = st.FIRST_SPECIAL // 32
    keep = np.zeros((MASK_WORDS - first) * 32, dtype=np.bool_)
    keep[: st.FIRST_SPECIAL - first * 32] = True  # the ordinary ids sharing the first word
    keep[[t - first * 32 for t in HARMONY_SPECIAL_TOKENS]] = True
    return np.packbits(keep, bitorder="little").view("<i4").astype(np.int32)


_KEEP_FROM: Final = st.FIRST_SPECIAL // 32
_KEEP_WORDS: Final = _special_keep_words()


class TokenRejectedError(ModelOutputError):
    """A token the grammar does not allow at this point of the turn.

    ``token`` is its id and ``position`` its index in the turn; the matcher is
    left as it was before the token.
    """

    def __init__(self, message: str, *, token: int, position: int) -> None:
        super().__init__(message)
        self.token = token
        self.position = position


class GrammarEngineError(ModelOutputError):
    """llguidance failed while following this turn (an internal error, not a rejection).

    Only the request whose tokens trigger the failure sees it: its matcher refuses
    every call until :meth:`TurnMatcher.reset`; other matchers of the same grammar
    rebuild themselves and go on. ``position`` is the index in the turn where the
    engine failed.
    """

    def __init__(self, message: str, *, position: int) -> None:
        super().__init__(message)
        self.position = position


# -- llguidance, the tokenizer, compiled grammars ------------------------------------------

_lock = threading.Lock()
_tokenizer: llguidance.LLTokenizer | None = None
_templates: OrderedDict[str, llguidance.LLMatcher] = OrderedDict()


def optional_module(module: str, why: str) -> Any:
    """``module``, imported now; :class:`ConstrainedUnavailableError` saying ``why`` if it
    is not installed. (importlib, not an import statement: these packages are optional
    and heavy, and only code that needs them gets here.)"""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConstrainedUnavailableError(why) from exc


def _llguidance() -> Any:
    return optional_module(
        "llguidance", f"constrained decoding needs llguidance: {install_hint('constrained')}"
    )


class _Vocabulary:
    """What llguidance's ``TokenizerWrapper`` reads: harmonia's table, specials marked."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokens = tokenizer.token_bytes_table
        self.special_token_ids = list(range(st.FIRST_SPECIAL, st.N_VOCAB))
        # llguidance allows its EOS only once the grammar is complete; the turn
        # ends on <|call|>/<|return|> before that, so any unused special will do.
        self.eos_token_id = st.ENDOFTEXT
        self.bos_token_id = None
        self._encode = tokenizer.encode_ordinary

    def __call__(self, text: str | bytes) -> list[int]:
        # llguidance calls this only to turn text it forces into tokens
        # (fast-forwarding, which harmonia does not use); masks never depend on it.
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        return self._encode(text)


def llg_tokenizer() -> llguidance.LLTokenizer:
    """The process-wide llguidance tokenizer for o200k_harmony (built once, ~1 s)."""
    global _tokenizer
    if _tokenizer is None:
        llg = _llguidance()
        tokenizer = get_tokenizer()
        with _lock:
            if _tokenizer is None:
                _tokenizer = llg.LLTokenizer(llg.TokenizerWrapper(_Vocabulary(tokenizer)))
    return _tokenizer


def _template(lark: str, slots: tuple[JsonSlot, ...]) -> llguidance.LLMatcher:
    """A compiled, never-used matcher for ``lark`` (cached: servers repeat tool sets).

    Its copies (``deep_copy``) share llguidance's lexer state with it, so a panic
    in one copy breaks them all: :func:`_evict` drops a template once that happens.
    """
    with _lock:
        hit = _templates.get(lark)
        if hit is not None:
            _templates.move_to_end(lark)
            return hit
    matcher = _compile(lark, slots)
    with _lock:
        _templates[lark] = matcher
        if len(_templates) > _TEMPLATE_CACHE_LIMIT:
            _templates.popitem(last=False)
    return matcher


def _evict(lark: str, template: llguidance.LLMatcher | None) -> None:
    """Forget ``template`` if it is still the cached one for ``lark``."""
    with _lock:
        if template is not None and _templates.get(lark) is template:
            del _templates[lark]


def _compile(lark: str, slots: tuple[JsonSlot, ...]) -> llguidance.LLMatcher:
    """A fresh matcher for ``lark``, sharing nothing with any other."""
    llg = _llguidance()
    tokenizer = llg_tokenizer()
    grammar = llg.LLMatcher.grammar_from_lark(lark)
    matcher: llguidance.LLMatcher = llg.LLMatcher(tokenizer, grammar, log_level=0)
    if matcher.is_error():
        raise _compile_error(llg, tokenizer, matcher.get_error(), slots)
    return matcher


def _compile_error(
    llg: Any, tokenizer: llguidance.LLTokenizer, error: str, slots: tuple[JsonSlot, ...]
) -> InputError:
    """Name the schema llguidance refused, if one was (each is tried on its own)."""
    for label, schema in slots:
        grammar = llg.LLMatcher.grammar_from_lark(f"start: %json {schema}")
        problem = llg.LLMatcher.validate_grammar(grammar, tokenizer)
        if problem:
            return InputError(f"{label}: llguidance cannot compile the schema: {problem}")
    return InputError(f"llguidance cannot compile the turn grammar: {error}")


# -- the matcher ---------------------------------------------------------------------------


class TurnMatcher:
    """Follows one assistant turn token by token and says which tokens may come next.

    Build it from the conversation the prompt was rendered from::

        matcher = TurnMatcher.from_conversation(conversation)
        mask = matcher.fill_mask()        # int32 bitmask of the allowed first tokens
        matcher.consume(token)            # the token that was sampled
        ...
        matcher.is_finished               # True once <|call|> or <|return|> was consumed

    Not thread-safe: use one matcher per sequence (:meth:`copy` is cheap).
    """

    def __init__(self, grammar: str) -> None:
        """Compile ``grammar`` (Lark text from :func:`build_turn_grammar`, or your own)."""
        if not isinstance(grammar, str):
            raise InputError(f"a grammar must be a str, not {type(grammar).__name__}")
        self._setup(grammar, ())

    def _setup(self, lark: str, slots: tuple[JsonSlot, ...]) -> None:
        self._lark = lark
        self._slots = slots
        self._json = KeyGuard.declared(lark)
        self.reset()

    def reset(self) -> None:
        """Back to the start of the turn (also after a :class:`GrammarEngineError`)."""
        self._tokens: list[int] = []
        self._failure: GrammarEngineError | None = None
        # _origin: the cached template this matcher was copied from (None once the
        # matcher runs on a private compile), to evict it if llguidance fails.
        self._origin: llguidance.LLMatcher | None = _template(self._lark, self._slots)
        self._matcher = self._origin.deep_copy()
        self._keys = self._key_guard([])

    def _key_guard(self, tokens: Sequence[int]) -> KeyGuard | None:
        """The key rule's state after ``tokens`` (None for a grammar without JSON marker)."""
        if self._json is None:
            return None
        token_bytes = get_tokenizer().token_bytes_table
        table = tables(token_bytes, MASK_WORDS, st.FIRST_SPECIAL)
        guard = KeyGuard(*self._json, token_bytes, table)
        for token in tokens:
            guard.feed(token)
        return guard

    @classmethod
    def from_conversation(
        cls, conversation: Conversation, options: GrammarOptions | None = None
    ) -> TurnMatcher:
        """A matcher for the assistant turn that continues ``conversation``.

        Raises :class:`~harmonia.InputError` when the declarations cannot be
        followed, naming the tool or response format whose schema llguidance
        refuses.
        """
        grammar = compile_turn(conversation, options)
        matcher = object.__new__(cls)
        matcher._setup(grammar.lark, grammar.json_slots)
        return matcher

    # -- state -----------------------------------------------------------------------

    @property
    def grammar(self) -> str:
        """The Lark text this matcher follows."""
        return self._lark

    @property
    def tokens(self) -> tuple[int, ...]:
        """The tokens consumed so far."""
        return tuple(self._tokens)

    @property
    def is_finished(self) -> bool:
        """True once the turn is complete (``<|call|>`` or ``<|return|>`` consumed)."""
        return bool(self._tokens) and self._tokens[-1] in st.STOP_TOKENS_FOR_ASSISTANT_ACTIONS

    @property
    def stop_token(self) -> int | None:
        """The token that ended the turn (``<|call|>`` or ``<|return|>``), else ``None``."""
        return self._tokens[-1] if self.is_finished else None

    def can_end(self) -> bool:
        """True when the next token may end the turn (a stop token is allowed now)."""
        return not self.is_finished and any(
            self.allows(t) for t in st.STOP_TOKENS_FOR_ASSISTANT_ACTIONS
        )

    def allows(self, token: int) -> bool:
        """Whether ``token`` may come next: exactly the bit :meth:`fill_mask` sets for it.

        (:meth:`consume` applies the key rule exactly, so it also takes the few
        harmless tokens the mask clears to stay cheap, such as ``' \\""'`` closing a
        string value; a sampler that follows the mask never meets them.)"""
        token = int(token)  # numpy and torch integers too
        self._check_usable()
        if self.is_finished or not _may_appear(token):
            return False
        if self._keys is not None and (
            not self._keys.permits(token) or self._keys.restricts(token)
        ):
            return False
        return self._or_recover(lambda: self._matcher.validate_tokens([token]) == 1)

    # -- masks -----------------------------------------------------------------------

    def fill_mask(self, out: NDArray[np.int32] | None = None) -> NDArray[np.int32]:
        """The bitmask of the tokens allowed next, written into ``out`` if given.

        ``out`` must be a C-contiguous ``int32`` array of :data:`MASK_WORDS`
        words (a row of a batch works). Once the turn is finished nothing is
        allowed: the mask is all zeros. Special tokens outside
        :data:`HARMONY_SPECIAL_TOKENS` are never allowed, whatever the grammar.
        """
        if out is None:
            out = np.zeros(MASK_WORDS, dtype=np.int32)
        elif out.dtype != np.int32 or out.shape != (MASK_WORDS,) or not out.flags.c_contiguous:
            raise InputError(
                f"a mask must be a C-contiguous int32 array of shape ({MASK_WORDS},), "
                f"not {out.dtype} {out.shape}"
            )
        self._check_usable()
        if self.is_finished:
            out[:] = 0
            return out
        self._or_recover(lambda: self._matcher.unsafe_compute_mask_ptr(out.ctypes.data, out.nbytes))
        out[_KEEP_FROM:] &= _KEEP_WORDS
        if self._keys is not None:
            self._keys.restrict(out)
        return out

    def allowed_tokens(self) -> NDArray[np.int64]:
        """The ids allowed next, ascending (a convenience; :meth:`fill_mask` is faster)."""
        return np.flatnonzero(mask_to_bool(self.fill_mask()))

    # -- moving ----------------------------------------------------------------------

    def consume(self, token: int) -> None:
        """Advance past ``token``; :class:`TokenRejectedError` if it is not allowed."""
        token = int(token)  # numpy and torch integers too
        self._check_usable()
        if self.is_finished or not _may_appear(token):
            raise self._rejected(token)
        if self._keys is not None and not self._keys.permits(token):
            raise self._rejected(token, "a JSON key may not hold an escape or repeat a key")
        if not self._matcher.consume_token(token) or self._matcher.is_error():
            # llguidance's matcher stays in its error state after a refused token (or a
            # failure of its own, maybe caused by another request): rebuild it, then
            # tell a refusal from a failure by asking the rebuilt one.
            error = self._rejected(token)
            self._rebuild(self._tokens)
            allowed = self._matcher.validate_tokens([token]) == 1
            self._check_engine()
            if not allowed:
                raise error
            self._matcher.consume_token(token)
            self._check_engine()
        self._tokens.append(token)
        if self._keys is not None:
            self._keys.feed(token)

    def consume_all(self, tokens: Iterable[int]) -> None:
        """:meth:`consume` each token in turn (stops at the first rejected one)."""
        for token in tokens:
            self.consume(token)

    def sync(self, tokens: Sequence[int]) -> None:
        """Make the consumed tokens equal ``tokens`` (an engine's output so far).

        Rolls back to the common prefix and consumes the rest, so it serves engines
        that hand over the whole output at each step, re-order beams or rewind;
        tokens after the turn's stop token are ignored.
        """
        seen = self._tokens
        common = len(seen)
        if list(tokens[:common]) != seen:  # a rewind: the usual step only appends
            diverge = (
                i for i, (new, old) in enumerate(zip(tokens, seen, strict=False)) if new != old
            )
            common = next(diverge, len(tokens))
            self.rollback(len(seen) - common)
        for token in tokens[common:]:
            if self.is_finished:
                break
            self.consume(token)

    def rollback(self, n: int) -> None:
        """Forget the last ``n`` tokens (for speculative decoding and re-sampling)."""
        if not 0 <= n <= len(self._tokens):
            raise InputError(f"cannot roll back {n} of {len(self._tokens)} tokens")
        self._check_usable()
        if n == 0:
            return
        keep = self._tokens[:-n]
        # llguidance cannot roll back into a max_tokens-bounded lexeme: replay.
        if self._matcher.rollback(n) and not self._matcher.is_error():
            self._tokens = keep
        else:
            self._rebuild(keep)
        self._keys = self._key_guard(self._tokens)

    def copy(self) -> TurnMatcher:
        """An independent matcher in the same state."""
        twin = copy.copy(self)
        twin._matcher = self._matcher.deep_copy()
        twin._tokens = list(self._tokens)
        twin._keys = None if self._keys is None else self._keys.copy()
        return twin

    # -- llguidance failures -------------------------------------------------------------
    #
    # llguidance turns a panic into an error state, but its matchers share lexer
    # state with the template they were copied from, and a panic leaves that state
    # broken for all of them (a mask of its EOS alone, <|endoftext|>). So a failed
    # matcher never serves again: the template is evicted, and the matcher replays
    # its tokens on a private compile. If the failure recurs there, it is this
    # turn's own, and GrammarEngineError says so; otherwise the turn goes on.

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _check_engine(self) -> None:
        if self._matcher.is_error():
            self._fail()

    def _or_recover(self, step: Callable[[], T]) -> T:
        """``step`` on the matcher; if llguidance failed, again on a rebuilt one, or fail.

        A failed llguidance matcher answers as if only its EOS were allowed; that is
        never handed out: rebuild (another request's failure) or raise (this one's).
        """
        result = step()
        if self._matcher.is_error():
            _evict(self._lark, self._origin)
            self._rebuild(self._tokens)
            result = step()
            self._check_engine()
        return result

    def _rebuild(self, tokens: Sequence[int]) -> None:
        """A healthy matcher that consumed ``tokens`` (a cached copy, else a private one)."""
        tokens = list(tokens)
        for private in (False, True):
            origin = None if private else _template(self._lark, self._slots)
            fresh = _compile(self._lark, self._slots) if origin is None else origin.deep_copy()
            if all(fresh.consume_token(t) for t in tokens) and not fresh.is_error():
                self._origin, self._matcher, self._tokens = origin, fresh, tokens
                return
            _evict(self._lark, origin)
            self._matcher = fresh
        self._tokens = tokens
        self._fail()

    def _fail(self) -> NoReturn:
        reason = (self._matcher.get_error() or "unknown error").strip().splitlines()[0]
        _evict(self._lark, self._origin)
        position = len(self._tokens)
        tail = "".join(_token_text(t) for t in self._tokens[-12:])
        self._failure = GrammarEngineError(
            f"llguidance failed at position {position} of the turn (after ...{tail!r}): "
            f"{reason}. This turn cannot be constrained further; reset() starts it again "
            "(report the grammar and the tokens as an llguidance bug)",
            position=position,
        )
        raise self._failure

    def _rejected(self, token: int, why: str | None = None) -> TokenRejectedError:
        position = len(self._tokens)
        if why is not None:
            reason = why
        elif self.is_finished:
            reason = "the turn is already finished"
        elif not 0 <= token < VOCAB_SIZE:
            reason = "it is not a token id of o200k_harmony"
        elif not _may_appear(token):
            reason = "it is a special token the harmony format never uses in a turn"
        else:
            reason = "the turn grammar does not allow it here"
        text = _token_text(token)
        tail = "".join(_token_text(t) for t in self._tokens[-12:])
        return TokenRejectedError(
            f"token {token} {text!r} at position {position} of the turn rejected: {reason} "
            f"(after ...{tail!r})",
            token=token,
            position=position,
        )


def _may_appear(token: int) -> bool:
    """An id of o200k_harmony that a turn may contain (no foreign special token)."""
    return 0 <= token < st.FIRST_SPECIAL or token in HARMONY_SPECIAL_TOKENS


def _token_text(token: int) -> str:
    if token in st.SPECIAL_TOKEN_TEXT:
        return st.SPECIAL_TOKEN_TEXT[token]
    if not 0 <= token < VOCAB_SIZE:
        return "?"
    return get_tokenizer().token_bytes_table[token].decode("utf-8", "replace")


# -- masks as arrays -------------------------------------------------------------------------


def mask_to_bool(mask: NDArray[np.int32], size: int = VOCAB_SIZE) -> NDArray[np.bool_]:
    """A bitmask as one bool per id, cut or padded (with ``False``) to ``size``.

    >>> import numpy as np
    >>> mask_to_bool(np.array([0b101], dtype=np.int32), 4).tolist()
    [True, False, True, False]
    """
    return _mask_bits(mask, size).view(np.bool_)


#: Float dtype -> (the signed int of its width, the bits of ``-inf`` in it). Native byte
#: order only: another order's bits would not read as these ints.
_FLOAT_BITS: Final[dict[np.dtype[Any], tuple[type[np.signedinteger[Any]], int]]] = {
    np.dtype(f): (i, int(np.array(-np.inf, f).view(i)))
    for f, i in ((np.float16, np.int16), (np.float32, np.int32), (np.float64, np.int64))
}


def _mask_bits(mask: NDArray[np.int32], size: int) -> NDArray[np.uint8]:
    """A bitmask as one ``uint8`` 0/1 per id, cut or padded (with 0) to ``size``."""
    words = np.ascontiguousarray(mask, dtype="<i4")
    return np.unpackbits(words.view(np.uint8), count=size, bitorder="little")


def apply_mask(
    logits: NDArray[np.floating[Any]], mask: NDArray[np.int32], *, copy: bool = False
) -> NDArray[np.floating[Any]]:
    """Set the logits of disallowed ids to ``-inf`` (last axis = vocabulary).

    In place, unless ``copy=True``, which masks a copy and leaves ``logits`` alone;
    returns the masked array either way. Logits longer than the vocabulary
    (padded) get ``-inf`` past its end.

    >>> import numpy as np
    >>> apply_mask(np.zeros(4, dtype=np.float32), np.array([0b101], dtype=np.int32)).tolist()
    [0.0, -inf, 0.0, -inf]
    """
    if copy:
        logits = logits.copy()
    bits = _mask_bits(mask, logits.shape[-1])
    known = _FLOAT_BITS.get(logits.dtype)
    if known is None:  # other float types (longdouble): numpy's masked copy
        np.copyto(logits, -np.inf, where=~bits.view(np.bool_))
        return logits
    # Branch-free on the floats' bits: keep them where allowed, write -inf elsewhere.
    # A boolean index or copyto(where=) branches per element, which costs up to 30x
    # as much on masks that alternate (a JSON string's allowed set).
    int_type, neg_inf = known
    keep = bits.astype(int_type)
    np.negative(keep, out=keep)  # all ones where allowed, 0 where not
    words = logits.view(int_type)
    words &= keep
    np.invert(keep, out=keep)  # all ones where not allowed
    keep &= int_type(neg_inf)
    words |= keep
    return logits
