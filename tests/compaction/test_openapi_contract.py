"""The OpenAPI document is the contract: each operation declares its answers,
and what the API answers matches what it declares.

Walks every operation once through Django's test client (any database) and
checks each body against the schema the document gives for its status, with
jsonschema. This matters most for the bodies the handlers render themselves
(context, snapshot, overflow): ninja does not validate those at run time.
The live-server fuzzing of the same contract is tests/test_contract_fuzz.py.
Here because it needs the compaction fixtures (offline summariser, no broker).
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from tests.conftest import tool_turn

from .conftest import turn

pytestmark = pytest.mark.django_db

PREFIX = "/api/v1"


@pytest.fixture
def document(client) -> dict[str, Any]:
    """As served (JSON: status codes are strings)."""
    response = client.get(f"{PREFIX}/openapi.json")
    assert response.status_code == 200
    return response.json()


def _operations(document: dict[str, Any]):
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield method.upper(), path, operation


def _check(document: dict[str, Any], method: str, template: str, response) -> None:
    """The response's status is declared for the operation and its JSON body fits the schema."""
    declared = document["paths"][template][method.lower()]["responses"]
    status = str(response.status_code)
    assert status in declared, f"{method} {template}: {status} is not declared"
    content = declared[status].get("content", {})
    if "application/json" not in content:
        return
    schema = {**content["application/json"]["schema"], "components": document["components"]}
    jsonschema.validate(response.json(), schema, cls=jsonschema.Draft202012Validator)


def test_every_operation_declares_its_success_schema_and_its_errors(document):
    operations = list(_operations(document))
    assert len(operations) >= 27
    for method, path, operation in operations:
        responses = operation["responses"]
        success = [s for s in responses if s.startswith("2")]
        assert success, f"{method} {path} declares no success response"
        for status in success:
            assert responses[status].get("content"), f"{method} {path} {status} has no schema"
        errors = {"401", "429", "503"} | ({"404"} if "{" in path else set())
        if method in ("POST", "PUT", "PATCH"):
            errors.add("413")
        for status in errors:
            schema = responses[status]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ErrorOut"}, (method, path, status)
    error = document["components"]["schemas"]["ErrorDetail"]
    assert set(error["required"]) == {"code", "message", "details"}


def test_every_answer_matches_its_declared_schema(document, alice, anon, session_factory):
    """One call per operation (and the error statuses), each checked against the document."""
    session = session_factory(6)
    sid = session.external_id
    calls: list[tuple[str, str, Any]] = []

    def call(method: str, template: str, path: str, body: Any = None, **kw: Any):
        response = alice.request(method, f"{PREFIX}{path}", body, **kw)
        _check(document, method, template, response)
        calls.append((method, template, response.status_code))
        return response

    created = call("POST", "/api/v1/sessions", "/sessions", {"model": "claude-sonnet-4-5"})
    other = created.json()["id"]
    call("GET", "/api/v1/sessions", "/sessions", limit=2)
    call("GET", "/api/v1/sessions/{sid}", f"/sessions/{other}")
    call("PATCH", "/api/v1/sessions/{sid}", f"/sessions/{other}", {"agent": "b"})
    call(
        "PUT",
        "/api/v1/sessions/{sid}/system",
        f"/sessions/{sid}/system",
        [{"name": "base", "content": "Be brief."}],
    )
    call(
        "PUT",
        "/api/v1/sessions/{sid}/tools",
        f"/sessions/{sid}/tools",
        [{"name": "bash", "description": "Run", "input_schema": {"type": "object"}}],
    )
    big = "\n".join(f"row {n}" for n in range(20_000))
    messages = [{"role": "user", "content": "go"}, *tool_turn("x1", big)]
    call(
        "POST",
        "/api/v1/sessions/{sid}/messages",
        f"/sessions/{sid}/messages",
        {"messages": messages},
    )
    call(
        "POST",
        "/api/v1/sessions/{sid}/messages",
        f"/sessions/{sid}/messages?format=openai",
        {"messages": [{"role": "user", "content": "and?"}]},
    )
    call(
        "POST",
        "/api/v1/sessions/{sid}/messages/retract",
        f"/sessions/{sid}/messages/retract",
        {"last": 1},
    )
    call("POST", "/api/v1/sessions/{sid}/usage", f"/sessions/{sid}/usage", {"input_tokens": 9000})
    call("GET", "/api/v1/sessions/{sid}/budget", f"/sessions/{sid}/budget")
    for fmt in ("anthropic", "openai", "raw", "responses"):
        call("GET", "/api/v1/sessions/{sid}/context", f"/sessions/{sid}/context", format=fmt)
    call("GET", "/api/v1/tools", "/tools")
    upload = call(
        "PUT",
        "/api/v1/sessions/{sid}/outputs",
        f"/sessions/{sid}/outputs",
        raw=b"a\nb\n",
        headers={"X-Tool-Name": "cat"},
    )
    ref = upload.json()["ref"]
    listed = call("GET", "/api/v1/sessions/{sid}/outputs", f"/sessions/{sid}/outputs")
    assert ref in [o["ref"] for o in listed.json()["items"]]
    call("GET", "/api/v1/refs/{ref}", f"/refs/{ref}", limit=1)
    call("GET", "/api/v1/refs/{ref}/grep", f"/refs/{ref}/grep", pattern="b")
    call("GET", "/api/v1/refs/{ref}/raw", f"/refs/{ref}/raw")
    tools = "/api/v1/sessions/{sid}/tools/"
    call("POST", tools + "preview", f"/sessions/{sid}/tools/preview", {"text": "hello"})
    call(
        "POST",
        tools + "reserve",
        f"/sessions/{sid}/tools/reserve",
        {"tool_call_id": "r", "tokens": 9},
    )
    call("POST", tools + "release", f"/sessions/{sid}/tools/release", {"tool_call_id": "r"})
    call(
        "POST",
        tools + "{name}/call",
        f"/sessions/{sid}/tools/tool_output_cache/call",
        {"ref_id": ref, "limit": 1},
    )
    call("GET", "/api/v1/sessions/{sid}/snapshot", f"/sessions/{sid}/snapshot")
    queued = call("POST", "/api/v1/sessions/{sid}/compact", f"/sessions/{sid}/compact", {})
    assert queued.status_code == 202
    for t in range(6, 9):  # past the compaction tier: the run makes a snapshot
        call(
            "POST",
            "/api/v1/sessions/{sid}/messages",
            f"/sessions/{sid}/messages",
            {"messages": turn(t)},
        )
    done = call(
        "POST",
        "/api/v1/sessions/{sid}/compact",
        f"/sessions/{sid}/compact",
        {"wait": True, "strategy": "summarize"},
    )
    assert done.status_code == 200 and done.json()["changed"] is True
    run_id = done.json()["run_id"]
    call("GET", "/api/v1/compactions/{run_id}", f"/compactions/{run_id}")
    call("GET", "/api/v1/sessions/{sid}/compactions", f"/sessions/{sid}/compactions")
    resumed = call("GET", "/api/v1/sessions/{sid}/snapshot", f"/sessions/{sid}/snapshot")
    assert resumed.json()["snapshot"] is not None
    snapshots = call("GET", "/api/v1/sessions/{sid}/snapshots", f"/sessions/{sid}/snapshots")
    snapshot_id = snapshots.json()["items"][0]["id"]
    restore = "/api/v1/sessions/{sid}/snapshots/{snapshot_id}/restore"
    call("POST", restore, f"/sessions/{sid}/snapshots/uncompacted/restore")
    call("POST", restore, f"/sessions/{sid}/snapshots/{snapshot_id}/restore")
    for fmt in ("anthropic", "raw"):
        call(
            "POST",
            "/api/v1/sessions/{sid}/overflow",
            f"/sessions/{sid}/overflow?format={fmt}",
            {"detail": "prompt is too long"},
        )
    # One record per context build above (three formats, two overflows), newest first.
    records = call("GET", "/api/v1/sessions/{sid}/calls", f"/sessions/{sid}/calls", limit=2)
    assert len(records.json()["items"]) == 2 and records.json()["next_cursor"]
    newest = records.json()["items"][0]["id"]
    one = call("GET", "/api/v1/sessions/{sid}/calls/{call_id}", f"/sessions/{sid}/calls/{newest}")
    assert one.json()["account"]["messages"]
    # The transcript out: a page of it, and the whole of it as JSONL.
    page = call("GET", "/api/v1/sessions/{sid}/messages", f"/sessions/{sid}/messages", limit=2)
    assert len(page.json()["items"]) == 2 and page.json()["next_cursor"]
    exported = call("GET", "/api/v1/sessions/{sid}/export", f"/sessions/{sid}/export")
    assert b"".join(exported.streaming_content).count(b"\n") > 2

    listed_models = call("GET", "/api/v1/models", "/models")
    assert any(m["prices"] for m in listed_models.json()["items"])
    # Prices are an operator's to set: an agent key is refused, in the one body.
    refused = call(
        "PUT",
        "/api/v1/models/{provider}/{model}/prices",
        "/models/anthropic/claude-sonnet-4-5/prices",
        {"input": 1, "output": 1, "cache_write_5m": 1, "cache_read": 1},
    )
    assert refused.status_code == 403

    # The errors, in the one body.
    call("GET", "/api/v1/sessions/{sid}", "/sessions/nope")  # 404
    call("POST", "/api/v1/sessions", "/sessions", {"model": "m", "bogus": 1})  # 422
    call("POST", "/api/v1/sessions", "/sessions", {"model": "m", "id": other})  # 409
    call("GET", "/api/v1/sessions/{sid}/context", f"/sessions/{sid}/context", format="xml")
    call("DELETE", "/api/v1/sessions/{sid}", f"/sessions/{other}")
    unauthorized = anon.get(f"{PREFIX}/sessions")
    _check(document, "GET", "/api/v1/sessions", unauthorized)
    assert unauthorized.status_code == 401

    statuses = {status for _, _, status in calls}
    assert {200, 201, 202, 403, 404, 409, 422} <= statuses
    walked = {(method, template) for method, template, _ in calls}
    assert walked == {(m, p) for m, p, _ in _operations(document)}
