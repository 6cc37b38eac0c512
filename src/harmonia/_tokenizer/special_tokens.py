"""The o200k_harmony special-token table, as the reference library builds it.

Every id from 199998 to 201088 is a special token (1,091 ids). The named ones are
below; the rest are ``<|reserved_N|>``. This differs from tiktoken's and quicktok's
``o200k_harmony``, which call 200018 ``<|endofprompt|>`` and stop at 201087; the
reference decodes 200018 as ``<|reserved_200018|>`` and encodes ``<|endofprompt|>``
as ordinary text, and so do we.
"""

from __future__ import annotations

from typing import Final

#: Number of ordinary (BPE) ranks in o200k_base.
N_ORDINARY: Final = 199_998
FIRST_SPECIAL: Final = 199_998
LAST_SPECIAL: Final = 201_088
#: One past the largest valid token id.
N_VOCAB: Final = LAST_SPECIAL + 1

STARTOFTEXT: Final = 199_998
ENDOFTEXT: Final = 199_999
RETURN: Final = 200_002
CONSTRAIN: Final = 200_003
CHANNEL: Final = 200_005
START: Final = 200_006
END: Final = 200_007
MESSAGE: Final = 200_008
CALL: Final = 200_012

_NAMED: Final[dict[int, str]] = {
    STARTOFTEXT: "<|startoftext|>",
    ENDOFTEXT: "<|endoftext|>",
    RETURN: "<|return|>",
    CONSTRAIN: "<|constrain|>",
    CHANNEL: "<|channel|>",
    START: "<|start|>",
    END: "<|end|>",
    MESSAGE: "<|message|>",
    CALL: "<|call|>",
}

#: Special-token id -> text, for all 1,091 special tokens.
SPECIAL_TOKEN_TEXT: Final[dict[int, str]] = {
    i: _NAMED.get(i, f"<|reserved_{i}|>") for i in range(FIRST_SPECIAL, N_VOCAB)
}
#: Special-token text -> id.
SPECIAL_TOKENS: Final[dict[str, int]] = {text: i for i, text in SPECIAL_TOKEN_TEXT.items()}

#: Tokens that end a message when parsing, and stop sampling.
STOP_TOKENS: Final = frozenset({RETURN, END, CALL})
#: Tokens that end an assistant turn that needs action (a final answer or a tool call).
STOP_TOKENS_FOR_ASSISTANT_ACTIONS: Final = frozenset({RETURN, CALL})


def is_special_token(token: int) -> bool:
    """True for the 1,091 special ids (199998..201088)."""
    return FIRST_SPECIAL <= token <= LAST_SPECIAL
