"""schemathesis hooks for tests/test_contract_fuzz.py (loaded through SCHEMATHESIS_HOOKS).

A fuzzed session id is almost never a real one, so every call would stop at
the 404 and the handlers behind it would go untested. Most generated path ids
are swapped for real ones the test created (CONTEXTSVC_FUZZ_IDS, JSON: path
parameter name -> ids); one in five keeps the fuzzed value, so the 404/422
paths of odd ids are fuzzed too.

Likewise some rules of an append are checks in code, not JSON Schema (a tool
message needs tool_call_id and answers an open call): a batch generated from
the schema alone almost always breaks one, and the append path behind the 422
would never run. Four batches in five are mended to keep those rules, their
fuzzed text and numbers kept; the fifth goes as generated. (A preview's or a
retract's "exactly one of" is in their schemas, as oneOf.)

Every choice is a hash of the generated value: the same cases every run.
"""

from __future__ import annotations

import json
import os
import zlib
from typing import Any

import schemathesis

IDS: dict[str, list[str]] = json.loads(os.environ.get("CONTEXTSVC_FUZZ_IDS") or "{}")
ROLES = ("user", "assistant", "tool")


def _pick(value: Any) -> int:
    return zlib.crc32(repr(value).encode())


@schemathesis.hook
def map_path_parameters(context: Any, path_parameters: dict[str, Any] | None) -> Any:
    if not path_parameters:
        return path_parameters
    # DELETE /sessions/{sid} gets a session of its own: the seeded ones stay for the rest.
    deleting = getattr(context.operation, "method", "").upper() == "DELETE"
    for name, value in list(path_parameters.items()):
        real = IDS.get("delete_sid") if deleting and name == "sid" else IDS.get(name)
        pick = _pick(value)
        if real and pick % 5:
            path_parameters[name] = real[pick % len(real)]
    return path_parameters


@schemathesis.hook
def map_body(context: Any, body: Any) -> Any:
    path = getattr(context.operation, "path", "") or ""
    if not isinstance(body, dict) or _pick(body) % 5 == 0:
        return body
    if path.endswith("/messages") and isinstance(body.get("messages"), list):
        open_calls: list[str] = []
        messages = [
            _message(m, i, open_calls)
            for i, m in enumerate(body["messages"])
            if isinstance(m, dict)
        ]
        return {**body, "messages": messages or [{"role": "user", "content": "hello"}]}
    return body


def _message(message: dict[str, Any], index: int, open_calls: list[str]) -> dict[str, Any]:
    """The message with its role rules kept (MessageIn's checks), its fuzzed values kept.

    A tool message answers the batch's oldest open tool call (a user message
    when there is none): an unknown tool_call_id is refused before anything runs.
    """
    out = dict(message)
    role = out.get("role") if out.get("role") in ROLES else "user"
    if role == "tool" and not open_calls:
        role = "user"
    out["role"] = role
    if role == "tool":
        out["tool_call_id"] = open_calls.pop(0)
        out.pop("tool_calls", None)
        out.pop("output_ref", None)  # a random ref is a 404 before anything runs
    else:
        out.pop("tool_call_id", None)
        out.pop("output_ref", None)
    if role != "assistant":
        out.pop("tool_calls", None)
    elif isinstance(out.get("tool_calls"), list):
        calls = [c for c in out["tool_calls"] if isinstance(c, dict)]
        out["tool_calls"] = [{**c, "id": f"{c.get('id')}_{index}_{n}"} for n, c in enumerate(calls)]
        open_calls.extend(c["id"] for c in out["tool_calls"])
    if isinstance(out.get("content"), list):
        out["content"] = [_part(p) for p in out["content"]]
    return out


def _part(part: Any) -> dict[str, Any]:
    if not isinstance(part, dict):
        return {"type": "text", "text": str(part)}
    kind = part.get("type") if isinstance(part.get("type"), str) else "text"
    if kind == "text" and not isinstance(part.get("text"), str):
        return {**part, "type": "text", "text": str(part.get("text", ""))}
    return {**part, "type": kind}
