"""The tokenizer layer: o200k_harmony text <-> token ids over a BPE engine.

Above the errors and names, below everything else. Other layers import from this
package, never from its modules (``special_tokens`` is the one module they may
import whole, for its token-id constants).
"""

from . import special_tokens
from .auto_engine import BpeEngine
from .registry import DEFAULT_ENGINE, ENGINE_ENV_VAR, ENGINES, get_engine
from .special_tokens import SPECIAL_TOKENS, is_special_token
from .tokenizer import SPECIAL_TOKENS_SET, SpecialSet, Tokenizer, get_tokenizer
from .vocab_file import verify_vocabulary, write_tiktoken_file

__all__ = [
    "DEFAULT_ENGINE",
    "ENGINES",
    "ENGINE_ENV_VAR",
    "SPECIAL_TOKENS",
    "SPECIAL_TOKENS_SET",
    "BpeEngine",
    "SpecialSet",
    "Tokenizer",
    "get_engine",
    "get_tokenizer",
    "is_special_token",
    "special_tokens",
    "verify_vocabulary",
    "write_tiktoken_file",
]
