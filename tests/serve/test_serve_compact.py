"""Compaction: POST /v1/responses/compact (the model summarises), and compaction items as
input (expanded into exactly what they stand for; an edited one is refused)."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from serve_support import ENC, MODEL, PARIS, post

from harmonia.serve._compact import (
    EXPANDED_HEADER,
    SUMMARY_INSTRUCTIONS,
    SUMMARY_REQUEST,
    Sealer,
)
from harmonia.serve._errors import APIError

ANSWER = PARIS
SUMMARY = "The user asked for the capital of France; the answer was Paris. Next: nothing."


def summary_script(text: str = SUMMARY) -> str:
    return (
        "<|channel|>analysis<|message|>Summarise.<|end|>"
        f"<|start|>assistant<|channel|>final<|message|>{text}<|return|>"
    )


def compacted(srv: Any) -> dict[str, Any]:
    """A stored turn, then its compaction (over the openai SDK, validated)."""
    srv.book.add(ANSWER)
    client = srv.client()
    first = client.responses.create(model=MODEL, input="Capital of France?")
    srv.book.add(summary_script())
    result = client.responses.compact(model=MODEL, previous_response_id=first.id)
    return result.model_dump(exclude_none=True)


def test_compact_needs_a_model(srv: Any) -> None:
    answer = post(srv, "/responses/compact", {"input": "Hi"})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "model"


def test_the_model_summarises_and_the_item_expands_back_exactly(srv: Any) -> None:
    result = compacted(srv)
    assert result["object"] == "response.compaction"
    user, item = result["output"]
    assert user["role"] == "user" and user["content"][0]["text"] == "Capital of France?"
    assert item["type"] == "compaction" and SUMMARY not in item["id"]
    assert result["usage"]["output_tokens"] > 0
    # The summarising turn: the conversation, under the compaction prompt.
    summarising = ENC.decode(list(srv.engine.prompts[-1]))
    assert SUMMARY_INSTRUCTIONS in summarising and SUMMARY_REQUEST in summarising
    assert "Capital of France?" in summarising and "Paris." in summarising
    # Given back as input, the item is one developer message: the header and the summary.
    srv.book.add("<|channel|>final<|message|>Lyon.<|return|>")
    body = {"model": MODEL, "input": [*result["output"], {"role": "user", "content": "More?"}]}
    assert post(srv, "/responses", body).status_code == 200
    prompt = ENC.decode(list(srv.engine.prompts[-1]))
    assert f"{EXPANDED_HEADER}\n\n{SUMMARY}" in prompt
    assert prompt.index(SUMMARY) < prompt.index("Capital of France?") < prompt.index("More?")
    assert "Paris." not in prompt.replace(SUMMARY, "")  # the turn it replaces is gone


def test_an_edited_or_foreign_item_is_a_clear_400(srv: Any) -> None:
    result = compacted(srv)
    user, item = result["output"]
    body, mac = item["encrypted_content"].split(".")
    tampered = {
        **item,
        "encrypted_content": body[:-2] + ("A" if body[-2] != "A" else "B") + body[-1] + "." + mac,
    }
    request = {"model": MODEL, "input": [user, tampered, {"role": "user", "content": "More?"}]}
    answer = post(srv, "/responses", request)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "invalid_compaction"
    assert error["param"] == "input[1].encrypted_content"
    with pytest.raises(openai.BadRequestError):
        srv.client().responses.create(
            model=MODEL, input=[{"type": "compaction", "encrypted_content": "x.y"}]
        )


def test_another_tenants_item_is_refused_like_an_edited_one(make_server: Any) -> None:
    server = make_server(api_keys=("sk-a", "sk-b"))
    server.book.add(ANSWER)
    server.book.add(summary_script())
    headers_a = {"Authorization": "Bearer sk-a"}
    made = httpx.post(
        server.base_url + "/responses/compact",
        json={"model": MODEL, "input": "Capital of France?"},
        headers=headers_a,
    )
    assert made.status_code == 200, made.text
    item = made.json()["output"][-1]
    request = {"model": MODEL, "input": [item, {"role": "user", "content": "More?"}]}
    theirs = httpx.post(
        server.base_url + "/responses", json=request, headers={"Authorization": "Bearer sk-b"}
    )
    assert theirs.status_code == 400 and theirs.json()["error"]["code"] == "invalid_compaction"


def test_the_sealer_keys() -> None:
    one = Sealer.from_env({"HARMONIA_COMPACTION_KEY": "k1"})
    again = Sealer.from_env({"HARMONIA_COMPACTION_KEY": "k1"})
    other = Sealer.from_env({"HARMONIA_COMPACTION_KEY": "k2"})
    sealed = one.seal({"v": 1, "summary": "s", "tenant": ""})
    assert again.unseal(sealed, "p")["summary"] == "s"  # replicas sharing the key agree
    with pytest.raises(APIError) as refused:
        other.unseal(sealed, "p")
    assert refused.value.status == 400 and refused.value.param == "p"
    ephemeral = Sealer.from_env({})
    assert ephemeral.ephemeral and not one.ephemeral
    with pytest.raises(APIError, match="HARMONIA_COMPACTION_KEY"):
        ephemeral.unseal(sealed, "p")


@pytest.mark.scripted_only("the summary's status is forced by a cut-off script")
def test_a_cut_off_summary_is_a_502(srv: Any) -> None:
    srv.book.add("<|channel|>final<|message|>" + "word " * 50)  # no stop token: cut off
    answer = post(srv, "/responses/compact", {"model": MODEL, "input": "Hi"})
    assert answer.status_code == 502 and answer.json()["error"]["code"] == "compaction_failed"
