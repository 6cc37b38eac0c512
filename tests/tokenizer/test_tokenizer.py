"""The o200k_harmony tokenizer: vocabulary identity, special tokens, encode/decode."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from tokenizer_corpus import varied_corpus

import harmonia
from harmonia._tokenizer import registry, vocab_file
from harmonia._tokenizer.special_tokens import SPECIAL_TOKENS

SPEC = Path(__file__).parent.parent / "golden" / "guide"


def test_bundled_vocabulary_is_the_official_o200k_base() -> None:
    assert len(vocab_file.ordinary_ranks()) == 199_998
    assert vocab_file.vocabulary_sha256() == vocab_file.O200K_BASE_SHA256
    assert vocab_file.O200K_BASE_SHA256 == (
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
    )
    harmonia.verify_vocabulary()


def test_written_tiktoken_file_has_the_official_hash(tmp_path: Path) -> None:
    import hashlib

    path = harmonia.write_tiktoken_file(tmp_path)
    data = Path(path).read_bytes()
    assert Path(path).name == "o200k_base.tiktoken"
    assert len(data) == 3_613_922
    assert hashlib.sha256(data).hexdigest() == vocab_file.O200K_BASE_SHA256


def test_tiktoken_and_quicktok_engines_agree_on_avaried_corpus() -> None:
    pytest.importorskip("tiktoken", reason="the tiktoken engine is an optional extra")
    quick = registry.get_engine("quicktok")
    tik = registry.get_engine("tiktoken")
    for text in varied_corpus():
        assert quick.encode_ordinary(text) == tik.encode_ordinary(text), text[:80]


def test_tiktoken_engine_renders_identically() -> None:
    pytest.importorskip("tiktoken", reason="the tiktoken engine is an optional extra")
    a = harmonia.load_harmony_encoding("HarmonyGptOss", engine="tiktoken")
    b = harmonia.load_harmony_encoding("HarmonyGptOss", engine="quicktok")
    assert a is not b
    conv = harmonia.Conversation.from_messages(
        [
            harmonia.Message.from_role_and_content(
                harmonia.Role.SYSTEM, harmonia.SystemContent.new().with_browser_tool()
            ),
            harmonia.Message.from_role_and_content(harmonia.Role.USER, "Grüße 😀 from <|start|>"),
        ]
    )
    assert a.render_conversation_for_completion(
        conv, harmonia.Role.ASSISTANT
    ) == b.render_conversation_for_completion(conv, harmonia.Role.ASSISTANT)


def test_unknown_engine_says_how_to_fix() -> None:
    with pytest.raises(harmonia.VocabularyError, match="choose one of 'auto', 'python'"):
        harmonia.load_harmony_encoding("HarmonyGptOss", engine="sentencepiece")


def test_unknown_encoding_name() -> None:
    with pytest.raises(ValueError, match="Invalid HarmonyEncodingName: foo"):
        harmonia.load_harmony_encoding("foo")


def test_load_is_shared_and_thread_safe() -> None:
    results: list[harmonia.HarmonyEncoding] = []

    def load() -> None:
        results.append(harmonia.load_harmony_encoding(harmonia.HarmonyEncodingName.HARMONY_GPT_OSS))

    threads = [threading.Thread(target=load) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8
    assert all(r is results[0] for r in results)
    assert results[0].name == "HarmonyGptOss"


def test_special_token_table_matches_the_reference() -> None:
    assert len(SPECIAL_TOKENS) == 1091
    assert min(SPECIAL_TOKENS.values()) == 199_998
    assert max(SPECIAL_TOKENS.values()) == 201_088
    expected = {
        "<|start|>": 200006,
        "<|end|>": 200007,
        "<|message|>": 200008,
        "<|channel|>": 200005,
        "<|constrain|>": 200003,
        "<|return|>": 200002,
        "<|call|>": 200012,
        "<|endoftext|>": 199999,
        "<|startoftext|>": 199998,
        "<|reserved_200018|>": 200018,
        "<|reserved_201088|>": 201088,
        "<|reserved_200000|>": 200000,
    }
    for text, token in expected.items():
        assert SPECIAL_TOKENS[text] == token
    assert "<|endofprompt|>" not in SPECIAL_TOKENS


def test_special_tokens_set_and_is_special(enc: harmonia.HarmonyEncoding) -> None:
    assert len(enc.special_tokens_set) == 1091
    assert "<|reserved_200018|>" in enc.special_tokens_set
    assert "<|endofprompt|>" not in enc.special_tokens_set
    assert not enc.is_special_token(199_997)
    assert enc.is_special_token(199_998)
    assert enc.is_special_token(201_088)
    assert not enc.is_special_token(201_089)


def test_stop_tokens(enc: harmonia.HarmonyEncoding) -> None:
    assert set(enc.stop_tokens()) == {200002, 200007, 200012}
    assert set(enc.stop_tokens_for_assistant_actions()) == {200002, 200012}


def test_encode_ordinary_text(enc: harmonia.HarmonyEncoding) -> None:
    assert enc.encode("hello world") == [24912, 2375]
    assert enc.encode("") == []
    assert enc.encode("💖") == [31446, 244]
    # lone surrogates are replaced by U+FFFD, as the reference does
    assert enc.encode("a\ud800b") == [64, 3251, 65]


def test_encode_allowed_and_disallowed_special(enc: harmonia.HarmonyEncoding) -> None:
    assert enc.encode("<|start|>", allowed_special={"<|start|>"}) == [200006]
    assert enc.encode("<|start|>", disallowed_special=()) == [27, 91, 5236, 91, 29]
    assert enc.encode("<|start|><|end|>", allowed_special={"<|start|>"}, disallowed_special=()) == [
        200006,
        27,
        91,
        419,
        91,
        29,
    ]
    assert enc.encode("a<|end|>b", allowed_special="all") == [64, 200007, 65]
    # <|endofprompt|> is not a harmony special token, even with everything allowed
    assert enc.encode("<|endofprompt|>", allowed_special="all") == [
        27,
        91,
        419,
        1440,
        82467,
        91,
        29,
    ]
    # allowed strings that are not special tokens are plain text
    assert enc.encode("<|foo|>", allowed_special={"<|foo|>"}) == enc.encode_ordinary("<|foo|>")


def test_disallowed_special_raises_with_instructions(enc: harmonia.HarmonyEncoding) -> None:
    with pytest.raises(harmonia.DisallowedSpecialTokenError) as info:
        enc.encode("x <|start|><|end|>", allowed_special={"<|start|>"})
    err = info.value
    assert isinstance(err, harmonia.HarmonyError) and isinstance(err, ValueError)
    assert err.token == "<|end|>" and err.position == 11
    assert str(err) == (
        "Encountered text corresponding to disallowed special token '<|end|>'.\n"
        "If you want this text to be encoded as a special token, pass it to `allowed_special`, "
        "e.g. `allowed_special={'<|end|>', ...}`.\n"
        "If you want this text to be encoded as normal text, disable the check for this token "
        "by passing `disallowed_special=(enc.special_tokens_set - {'<|end|>'})`.\n"
        "To disable this check for all special tokens, pass `disallowed_special=()`.\n"
    )


def test_custom_disallowed_collection(enc: harmonia.HarmonyEncoding) -> None:
    with pytest.raises(harmonia.DisallowedSpecialTokenError, match="'forbidden'"):
        enc.encode("a forbidden word", disallowed_special={"forbidden"})
    assert enc.encode("<|start|>", disallowed_special={"x"}) == [27, 91, 5236, 91, 29]


def test_decode_special_and_reserved(enc: harmonia.HarmonyEncoding) -> None:
    assert enc.decode_utf8([200014]) == "<|reserved_200014|>"
    assert enc.decode_utf8([200018]) == "<|reserved_200018|>"
    assert enc.decode_utf8([201088]) == "<|reserved_201088|>"
    assert enc.decode_utf8([200006, 1428, 200008]) == "<|start|>user<|message|>"
    assert enc.decode_bytes([9552]) == b" \xf0\x9f"


def test_decode_errors(enc: harmonia.HarmonyEncoding) -> None:
    with pytest.raises(harmonia.DecodeError) as info:
        enc.decode_utf8([24912, 99999999])
    assert str(info.value) == (
        "Could not decode tokens: Invalid token error: Invalid token for decoding: 99999999"
    )
    assert info.value.token_index == 1
    with pytest.raises(harmonia.DecodeError, match="^Invalid token for decoding: -1$"):
        enc.decode([5, -1])
    with pytest.raises(
        harmonia.DecodeError,
        match="^Could not decode tokens: Invalid utf-8 sequence: incomplete utf-8 byte "
        "sequence from index 8$",
    ):
        enc.decode_utf8([132990, 9552])
    with pytest.raises(
        harmonia.DecodeError, match="invalid utf-8 sequence of 2 bytes from index 1$"
    ):
        enc.decode_utf8([9552, 24912])
    assert enc.decode([132990, 9552]) == "Chicken \ufffd"


def test_encode_decode_round_trip(enc: harmonia.HarmonyEncoding) -> None:
    for text in varied_corpus()[:100]:
        assert enc.decode_utf8(enc.encode(text, disallowed_special=())) == text
