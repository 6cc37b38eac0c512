"""Compaction: ``POST /v1/responses/compact``, and ``compaction`` items as input.

gpt-oss summarises the conversation itself: the conversation is rendered as
usual, under a developer message that asks for a summary to continue from
(:data:`SUMMARY_INSTRUCTIONS`) and a last user message asking for it
(:data:`SUMMARY_REQUEST`); the final answer is the summary. The answer is the
spec's ``response.compaction`` object: the conversation's user messages as
they were, then one ``compaction`` item whose ``encrypted_content`` carries
the summary, signed with the server's key (:class:`Sealer`) and bound to the
API key's tenant. Given back as input, a ``compaction`` item expands into
exactly one developer message, :data:`EXPANDED_HEADER` and the summary; an
item whose signature does not hold (edited, another server's key, another
tenant's) is a 400.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import secrets
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

from .._names import COMMENTARY
from .._runtime import new_id
from ._errors import APIError

JsonDict = dict[str, Any]

#: The variable holding the key that signs compaction items (any string; every replica
#: sharing a store needs the same). Without it each process makes its own.
COMPACTION_KEY_ENV: Final = "HARMONIA_COMPACTION_KEY"

#: The developer message of the summarising turn.
SUMMARY_INSTRUCTIONS: Final = (
    "Your context is about to be compacted: the conversation so far will be replaced by a "
    "summary you write now, and you will continue from that summary alone. Write it for "
    "yourself, so that you can carry on exactly where the conversation stopped. Keep: what "
    "the user wants and every constraint they gave; decisions made and why; facts, names, "
    "paths, values and tool results that later steps need; what has been done and what is "
    "left, with the next step first. Leave out pleasantries and anything already superseded. "
    "Do not call tools; answer with the summary only."
)
#: The last user message of the summarising turn.
SUMMARY_REQUEST: Final = "Write the summary of our conversation so far now."
#: The first line of the developer message a compaction item expands into.
EXPANDED_HEADER: Final = (
    "Summary of the earlier conversation, which was compacted (it stands for those turns):"
)
_VERSION: Final = 1

log = logging.getLogger("harmonia.serve")


class Sealer:
    """Signs and checks compaction items (HMAC-SHA256 over their JSON payload).

    Signed, not encrypted: the summary is the model's text about the client's own
    conversation, so the client may read it; what must hold is that only this
    server's summaries (for this tenant) are taken back as the model's context.
    """

    def __init__(self, key: bytes, *, ephemeral: bool = False) -> None:
        self._key = key
        #: Whether the key was made at start-up (items do not outlive the process).
        self.ephemeral = ephemeral

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Sealer:
        value = (os.environ if environ is None else environ).get(COMPACTION_KEY_ENV, "")
        if value:
            return cls(value.encode())
        return cls(secrets.token_bytes(32), ephemeral=True)

    def seal(self, payload: JsonDict) -> str:
        body = _b64(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode())
        return f"{body}.{_b64(self._mac(body))}"

    def unseal(self, text: object, path: str) -> JsonDict:
        """The payload of a sealed text; a 400 at ``path`` unless it is intact and ours."""
        if isinstance(text, str) and text.count(".") == 1:
            body, mac = text.split(".")
            try:
                given = base64.urlsafe_b64decode(mac + "=" * (-len(mac) % 4))
                if hmac.compare_digest(given, self._mac(body)):
                    raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
                    payload = json.loads(raw)
                    if isinstance(payload, dict) and payload.get("v") == _VERSION:
                        return payload
            except ValueError:
                pass
        raise APIError(
            400,
            "this compaction item was not made by this server for this API key, or was "
            "changed: send encrypted_content exactly as /v1/responses/compact returned it"
            + (
                " (this server signs with a key made at start-up: set "
                f"{COMPACTION_KEY_ENV} to keep items valid across restarts and replicas)"
                if self.ephemeral
                else ""
            ),
            param=path,
            code="invalid_compaction",
        )

    def _mac(self, body: str) -> bytes:
        return hmac.new(self._key, body.encode(), hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def expand_compactions(items: Sequence[JsonDict], sealer: Sealer, tenant: str) -> list[JsonDict]:
    """``items`` with each ``compaction`` item replaced by what it stands for: one
    developer message holding :data:`EXPANDED_HEADER` and the summary."""
    out: list[JsonDict] = []
    for index, item in enumerate(items):
        if item.get("type") != "compaction":
            out.append(item)
            continue
        path = f"input[{index}].encrypted_content"
        payload = sealer.unseal(item.get("encrypted_content"), path)
        if payload.get("tenant") != tenant or not isinstance(payload.get("summary"), str):
            sealer.unseal(None, path)  # another tenant's: the same 400 as an edited one
        content = [{"type": "input_text", "text": f"{EXPANDED_HEADER}\n\n{payload['summary']}"}]
        out.append({"type": "message", "role": "developer", "content": content})
    return out


def summarising_request(model: str, items: Sequence[JsonDict]) -> JsonDict:
    """The Responses request whose answer is the summary of ``items`` (not stored, no tools)."""
    return {
        "model": model,
        "instructions": SUMMARY_INSTRUCTIONS,
        "input": [*items, {"type": "message", "role": "user", "content": SUMMARY_REQUEST}],
        "store": False,
        "tool_choice": "none",
    }


def compaction(
    sealer: Sealer, result: JsonDict, items: Sequence[JsonDict], tenant: str, model: str
) -> JsonDict:
    """The spec's ``response.compaction`` object from the summarising response ``result``;
    a 502 when the model wrote no complete summary."""
    summary = "\n\n".join(
        part.get("text", "")
        for item in result["output"]
        if item.get("type") == "message" and item.get("phase") != COMMENTARY
        for part in item.get("content") or ()
    ).strip()
    if result["status"] != "completed" or not summary:
        raise APIError(
            502,
            f"the model wrote no complete summary (status {result['status']}); try again, "
            "or compact a shorter conversation",
            code="compaction_failed",
        )
    sealed = sealer.seal({"v": _VERSION, "tenant": tenant, "model": model, "summary": summary})
    users = [item for item in items if item.get("type") == "message" and item.get("role") == "user"]
    item = {"type": "compaction", "id": new_id("cmp"), "encrypted_content": sealed}
    return {
        "id": new_id("resp"),
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": [*users, item],
        "usage": result["usage"],
    }
