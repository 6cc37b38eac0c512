"""The harmony format's vocabulary, public: words, special-token ids, defaults.

Code outside harmonia's core (the apps here, and yours) spells the format
with these names instead of literals: channels, tool namespaces, content-type
words, the ids of the named special tokens of ``o200k_harmony``, the rule for
a tool's name, and the default chain-of-thought policy. They are defined in
the core (``_names``, ``_tokenizer.special_tokens``) and only re-exported
here; ``tests/test_vocabulary.py`` fails when a special-token id or a channel
word is written as a literal anywhere else in ``src/``.

>>> from harmonia import vocabulary as v
>>> v.FINAL, v.RETURN_ID, v.is_tool_name("functions.get_weather")
('final', 200002, True)
"""

from __future__ import annotations

from typing import Final

from ._names import (
    ANALYSIS,
    ASSISTANT,
    BROWSER,
    BUILTIN_NAMESPACES,
    CHANNELS,
    CODE,
    COMMENTARY,
    CONSTRAIN,
    CONSTRAIN_JSON,
    CONTENT_TYPE_WORDS,
    COT_POLICY_NAMES,
    DEFAULT_COT_POLICY,
    FINAL,
    FUNCTIONS,
    JSON,
    NOT_RECIPIENTS,
    PYTHON,
    CotPolicyName,
    is_tool_name,
)
from ._tokenizer import special_tokens as _st

# The named special tokens of o200k_harmony, by id.
STARTOFTEXT_ID: Final = _st.STARTOFTEXT
ENDOFTEXT_ID: Final = _st.ENDOFTEXT
RETURN_ID: Final = _st.RETURN
CONSTRAIN_ID: Final = _st.CONSTRAIN
CHANNEL_ID: Final = _st.CHANNEL
START_ID: Final = _st.START
END_ID: Final = _st.END
MESSAGE_ID: Final = _st.MESSAGE
CALL_ID: Final = _st.CALL
#: Every id from here to ``LAST_SPECIAL_ID`` (inclusive) is a special token.
FIRST_SPECIAL_ID: Final = _st.FIRST_SPECIAL
LAST_SPECIAL_ID: Final = _st.LAST_SPECIAL
#: One past the largest valid token id.
N_VOCAB: Final = _st.N_VOCAB
#: gpt-oss's embedding rows (its config's ``vocab_size``): one fewer than ``N_VOCAB``.
GPT_OSS_VOCAB_SIZE: Final = _st.LAST_SPECIAL
#: The ids that end a message (``<|return|>``, ``<|end|>``, ``<|call|>``).
STOP_IDS: Final = _st.STOP_TOKENS
#: The ids that end an assistant turn needing action, in id order: ``<|return|>``, ``<|call|>``.
ACTION_STOP_IDS: Final = tuple(sorted(_st.STOP_TOKENS_FOR_ASSISTANT_ACTIONS))
# Their texts, for code that writes format text to encode with ``allowed_special``.
START_TEXT: Final = _st.SPECIAL_TOKEN_TEXT[_st.START]
CHANNEL_TEXT: Final = _st.SPECIAL_TOKEN_TEXT[_st.CHANNEL]
MESSAGE_TEXT: Final = _st.SPECIAL_TOKEN_TEXT[_st.MESSAGE]
END_TEXT: Final = _st.SPECIAL_TOKEN_TEXT[_st.END]
CALL_TEXT: Final = _st.SPECIAL_TOKEN_TEXT[_st.CALL]
RETURN_TEXT: Final = _st.SPECIAL_TOKEN_TEXT[_st.RETURN]


def is_special_id(token: int) -> bool:
    """Whether ``token`` is one of o200k_harmony's 1,091 special ids.

    >>> is_special_id(START_ID), is_special_id(42)
    (True, False)
    """
    return _st.is_special_token(token)


def special_text(token: int) -> str:
    """The text of a special id (``<|start|>``, ``<|reserved_200013|>``...).

    >>> special_text(CALL_ID)
    '<|call|>'
    """
    return _st.SPECIAL_TOKEN_TEXT[token]


__all__ = [
    "ACTION_STOP_IDS",
    "ANALYSIS",
    "ASSISTANT",
    "BROWSER",
    "BUILTIN_NAMESPACES",
    "CALL_ID",
    "CALL_TEXT",
    "CHANNELS",
    "CHANNEL_ID",
    "CHANNEL_TEXT",
    "CODE",
    "COMMENTARY",
    "CONSTRAIN",
    "CONSTRAIN_ID",
    "CONSTRAIN_JSON",
    "CONTENT_TYPE_WORDS",
    "COT_POLICY_NAMES",
    "DEFAULT_COT_POLICY",
    "ENDOFTEXT_ID",
    "END_ID",
    "END_TEXT",
    "FINAL",
    "FIRST_SPECIAL_ID",
    "FUNCTIONS",
    "GPT_OSS_VOCAB_SIZE",
    "JSON",
    "LAST_SPECIAL_ID",
    "MESSAGE_ID",
    "MESSAGE_TEXT",
    "NOT_RECIPIENTS",
    "N_VOCAB",
    "PYTHON",
    "RETURN_ID",
    "RETURN_TEXT",
    "STARTOFTEXT_ID",
    "START_ID",
    "START_TEXT",
    "STOP_IDS",
    "CotPolicyName",
    "is_special_id",
    "is_tool_name",
    "special_text",
]
