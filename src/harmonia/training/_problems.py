"""Problems found in input rows: a stable code, a severity, where, and why.

Errors reject the row (it goes to the rejects file with its reason); warnings are
counted and the row is kept. Codes never change meaning; new ones get new numbers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Final, Literal

from harmonia import InputError

Severity = Literal["error", "warning"]

#: code -> (name, severity, what it means); E codes are errors, W codes warnings.
CODES: Final[dict[str, tuple[str, Severity, str]]] = {
    code: (name, "warning" if code.startswith("W") else "error", meaning)
    for code, name, meaning in (
        line.split(maxsplit=2)
        for line in """
E101 bad_json              the line is not valid JSON
E102 no_messages           the row holds no conversation
E103 unknown_format        the row matches no input format
E104 invalid_utf8          the line is not valid UTF-8 (the message says where)
E105 missing_content       a message has no content (assistant: nor calls)
E110 unknown_role          a role that harmony does not have
E120 no_trainable_tokens   nothing is left to train after the policy
E130 tool_result_mismatch  a tool result cannot be paired with its call
E134 reasoning_conflict    thinking/reasoning/reasoning_content disagree
E140 over_length           longer than max_length with overflow=drop
E141 trim_failed           overflow=trim-history cannot make the sample fit
E150 invalid_row           the row cannot be converted (the message says where)
E151 unreadable_header     a header field (channel, recipient, author name, content type) \
that cannot be read back: whitespace, '<' or empty
W202 special_token_text    special-token spelling inside a text
W203 cot_excluded          assistant messages left untrained for faithfulness
W206 truncated             overflow=truncate or trim-history cut the sample
""".strip().splitlines()
    )
}


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem of one input row (``line`` counts from 1)."""

    code: str
    message: str
    line: int
    source: str = ""

    @property
    def name(self) -> str:
        return CODES[self.code][0]

    @property
    def severity(self) -> Severity:
        return CODES[self.code][1]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "name": self.name, "severity": self.severity}


class RowError(InputError):
    """A row that must be rejected, with its problem code."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(f"{code} {CODES[code][0]}: {message}")
        self.reason = message
