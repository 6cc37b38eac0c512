"""The ids of an engine's stream event are checked before they reach the parser."""

from __future__ import annotations

from typing import Any

import pytest

from harmonia import EngineError
from harmonia.engines._http import HttpClient, HttpOptions, int_list

CLIENT = HttpClient(engine="vllm", base_url="http://e", api_key=None, options=HttpOptions())


@pytest.mark.parametrize("value", [[], [0], [200002], [1, 2, 3]])
def test_token_ids_pass_as_they_are(value: list[int]) -> None:
    assert int_list(value, "token_ids", CLIENT, "http://e/x") is value


def test_no_ids_is_an_empty_list() -> None:
    assert int_list(None, "token_ids", CLIENT, "http://e/x") == []


@pytest.mark.parametrize(
    "value",
    [[True], [-1], ["1"], [1.0], [None], "12", 12, {"0": 1}, [1, True], [1, -2], [1, 2.0]],
)
def test_anything_else_is_malformed_stream_data(value: Any) -> None:
    with pytest.raises(EngineError, match="malformed stream data: token_ids is .*not token ids"):
        int_list(value, "token_ids", CLIENT, "http://e/x")
