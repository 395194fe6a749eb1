"""The proxy's request gate, cause by cause: a 4xx in the provider's shape naming the field, nothing written.

Each case is one way a body used to end in a 500 (a NUL reaching
PostgreSQL, a lone surrogate or NaN read by a lenient parser, a 500-level
schema, a 33 MiB body, a 201-character name, a value of the wrong type in
front of a converter); each is answered 400 (413 for the size) before any
row is written.
"""

from __future__ import annotations

import copy
import json

import pytest
from asgiref.sync import async_to_sync
from django.db import connection

from contextsvc.asgi import application
from proxy.models import ClientView, StoredResponse
from sessions.models import ContextCall, Message, Session, ToolOutput, UsageReport
from tests.proxy import fuzz_bodies as fb
from tests.proxy import responses_fixtures
from tests.proxy.conftest import PROXY_DB, UPSTREAM_KEY, asgi_http

pytestmark = PROXY_DB
fake_responses = responses_fixtures.fake_responses

MODELS = (Session, Message, UsageReport, ToolOutput, ClientView, StoredResponse, ContextCall)
ROWS_SQL = "SELECT " + ", ".join(f"(SELECT count(*) FROM {m._meta.db_table})" for m in MODELS)
PATHS = {
    "anthropic": "/proxy/anthropic/v1/messages",
    "count": "/proxy/anthropic/v1/messages/count_tokens",
    "chat": "/proxy/openai/v1/chat/completions",
    "responses": "/proxy/openai/v1/responses",
}
SEEDS = {
    "anthropic": fb.ANTHROPIC,
    "count": fb.ANTHROPIC,
    "chat": fb.CHAT,
    "responses": fb.RESPONSES,
}


def rows() -> tuple[int, ...]:
    with connection.cursor() as cursor:
        cursor.execute(ROWS_SQL)
        return tuple(cursor.fetchone())


def post(key: str, where: str, raw: bytes, headers: dict[str, str] | None = None):
    sent = {
        "x-contextsvc-key": key,
        "x-api-key": UPSTREAM_KEY,
        "authorization": f"Bearer {UPSTREAM_KEY}",
        "content-type": "application/json",
        **(headers or {}),
    }

    async def call():
        async with asgi_http() as http:
            return await http.post(f"http://localhost{PATHS[where]}", content=raw, headers=sent)

    return async_to_sync(call)()


def mutated(where: str, path: tuple, value) -> bytes:
    body = copy.deepcopy(SEEDS[where])
    parent = body
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return json.dumps(body).encode()


def refused(key: str, where: str, raw: bytes, status: int = 400) -> str:
    """Post ``raw``; assert the provider-shaped refusal and no write; the field it names."""
    before = rows()
    response = post(key, where, raw)
    assert response.status_code == status, response.text[:500]
    assert "x-contextsvc-session" not in response.headers
    body = response.json()
    if where in ("anthropic", "count"):
        assert body["type"] == "error"
        assert set(body["error"]) == {"type", "message"}
        assert body["error"]["type"] == "invalid_request_error" or status == 413
        field = body["error"]["message"].split(":", 1)[0]
    else:
        assert set(body["error"]) == {"message", "type", "param", "code"}
        assert body["error"]["code"] is None
        field = body["error"]["param"]
    assert rows() == before
    return field


@pytest.fixture
def key(request, upstreams, fake_responses, alice_key, settings):
    """The caller's agent key; Chat Completions goes to the fake OpenAI, Responses to the
    fake Responses API (both are OpenAI's base URL)."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("where") == "chat":
        settings.CONTEXTSVC_UPSTREAM_OPENAI_URL = f"{upstreams[1].base_url}/v1"
    return alice_key[1]


NUL = "a\x00b"
NUL_FIELDS = [
    ("anthropic", ("model",), "model"),
    ("anthropic", ("system", 0, "text"), "system.0.text"),
    ("anthropic", ("tools", 0, "name"), "tools.0.name"),
    ("anthropic", ("tools", 0, "input_schema", "properties", "path", "type"), "tools.0"),
    ("anthropic", ("messages", 0, "content"), "messages.0.content"),
    ("anthropic", ("messages", 1, "content", 1, "input", "path"), "messages.1.content.1.input"),
    ("anthropic", ("metadata", "user_id"), "metadata.user_id"),
    ("count", ("messages", 2, "content", 1, "text"), "messages.2.content.1.text"),
    ("chat", ("messages", 0, "content"), "messages.0.content"),
    ("chat", ("messages", 2, "tool_calls", 0, "function", "arguments"), "messages.2.tool_calls"),
    ("chat", ("messages", 4, "name"), "messages.4.name"),
    ("chat", ("tools", 0, "function", "description"), "tools.0.function.description"),
    ("responses", ("instructions",), "instructions"),
    ("responses", ("input", 0, "content", 0, "text"), "input.0.content.0.text"),
    ("responses", ("input", 1, "arguments"), "input.1.arguments"),
    ("responses", ("metadata", "run"), "metadata.run"),
]


@pytest.mark.parametrize(("where", "path", "field"), NUL_FIELDS)
def test_proxy_gate_nul_is_refused_naming_the_field(key, where, path, field):
    named = refused(key, where, mutated(where, path, NUL))
    assert named.startswith(field), named


@pytest.mark.parametrize(
    ("where", "path"),
    [
        ("anthropic", ("messages", 2, "content", 0, "content")),
        ("chat", ("messages", 3, "content")),
        ("responses", ("input", 2, "output")),
    ],
)
def test_proxy_gate_nul_in_tool_output_is_data_and_kept(key, where, path):
    response = post(key, where, mutated(where, path, "bin\x00ary"))
    assert response.status_code == 200, response.text[:300]
    tool = Message.objects.filter(role="tool").latest("id")
    assert "\x00" not in tool.content and "bin" in (tool.view or tool.content)


@pytest.mark.parametrize(
    "literal", [b'"\\ud800"', b'"x\\udfffy"', b"NaN", b"Infinity", b"-Infinity", b"1e999"]
)
@pytest.mark.parametrize("where", ["anthropic", "chat", "responses"])
def test_proxy_gate_refuses_lone_surrogates_and_non_finite_numbers(key, where, literal):
    raw = mutated(where, ("model",), "@@").replace(b'"@@"', literal)
    assert refused(key, where, raw) == "body"


def test_proxy_gate_refuses_a_lone_surrogate_written_raw(key):
    raw = json.dumps(fb.ANTHROPIC, ensure_ascii=False).replace("read a.py", "\ud800")
    assert refused(key, "anthropic", raw.encode("utf-8", "surrogatepass")) == "body"


@pytest.mark.parametrize(
    ("where", "path", "field"),
    [
        ("anthropic", ("tools", 0, "input_schema", "properties"), "tools.0"),
        ("anthropic", ("messages", 1, "content", 1, "input"), "messages.1"),
        ("count", ("tools", 0, "input_schema", "properties"), "tools.0"),
        ("chat", ("tools", 0, "function", "parameters", "properties"), "tools.0"),
        ("responses", ("tools", 0, "parameters", "properties"), "tools.0"),
        ("responses", ("metadata",), "metadata"),
    ],
)
def test_proxy_gate_caps_json_depth_at_64(key, where, path, field):
    named = refused(key, where, mutated(where, path, fb.deep(500)))
    assert named == field
    assert "deeper than 64" in post(key, where, mutated(where, path, fb.deep(500))).text


def test_proxy_gate_accepts_json_64_levels_deep(key):
    response = post(key, "anthropic", mutated("anthropic", ("metadata",), fb.deep(63)))
    assert response.status_code == 200, response.text[:300]


LONG = "n" * 201
LONG_NAMES = [
    ("anthropic", ("model",), "model"),
    ("anthropic", ("tools", 0, "name"), "tools.0.name"),
    ("anthropic", ("messages", 1, "content", 1, "name"), "messages.1.content.1.name"),
    ("anthropic", ("messages", 1, "content", 1, "id"), "messages.1.content.1.id"),
    ("chat", ("tools", 0, "function", "name"), "tools.0.function.name"),
    ("chat", ("messages", 2, "tool_calls", 0, "id"), "messages.2.tool_calls.0.id"),
    ("chat", ("messages", 4, "name"), "messages.4.name"),
    ("responses", ("model",), "model"),
    ("responses", ("input", 1, "call_id"), "input.1.call_id"),
    ("responses", ("tools", 0, "name"), "tools.0.name"),
]


@pytest.mark.parametrize(("where", "path", "field"), LONG_NAMES)
def test_proxy_gate_refuses_names_over_200_characters(key, where, path, field):
    assert refused(key, where, mutated(where, path, LONG)) == field


@pytest.mark.parametrize(
    ("where", "path"),
    [("anthropic", ("model",)), ("anthropic", ("tools", 0, "name")), ("responses", ("model",))],
)
def test_proxy_gate_accepts_names_of_200_characters(key, where, path):
    response = post(key, where, mutated(where, path, "n" * 200))
    assert response.status_code == 200, response.text[:300]


WRONG_TYPES = [
    ("anthropic", ("tools",), {"name": "x"}, "tools"),
    ("anthropic", ("tools", 0), "read_file", "tools.0"),
    ("anthropic", ("tools", 0, "input_schema"), "object", "tools.0.input_schema"),
    ("anthropic", ("tools", 0, "description"), 7, "tools.0.description"),
    ("anthropic", ("system",), 7, "system"),
    ("anthropic", ("system", 0), {"type": "image"}, "system.0"),
    ("anthropic", ("messages",), {"role": "user"}, "messages"),
    ("anthropic", ("messages", 0), 3, "messages.0"),
    ("anthropic", ("messages", 0, "role"), {"x": 1}, "messages.0.role"),
    ("anthropic", ("messages", 0, "content"), 3, "messages.0.content"),
    ("anthropic", ("messages", 1, "content", 1, "input"), [1], "messages.1.content.1.input"),
    ("anthropic", ("messages", 2, "content", 0, "content"), 5, "messages.2.content.0.content"),
    ("anthropic", ("messages", 2, "content", 0, "is_error"), "y", "messages.2.content.0.is_error"),
    ("anthropic", ("max_tokens",), "256", "max_tokens"),
    ("anthropic", ("max_tokens",), 2**40, "max_tokens"),
    ("anthropic", ("stream",), "yes", "stream"),
    ("count", ("tools", 0, "name"), ["x"], "tools.0.name"),
    ("count", ("messages", 0), [], "messages.0"),
    ("chat", ("tools", 0, "function"), "read_file", "tools.0.function"),
    ("chat", ("tools", 0, "function", "parameters"), [], "tools.0.function.parameters"),
    ("chat", ("tools", 0, "type"), None, "tools.0.type"),
    ("chat", ("tools", 0, "type"), 3, "tools.0.type"),
    ("chat", ("messages", 1, "content"), 4, "messages.1.content"),
    ("chat", ("messages", 1, "content", 0), "text", "messages.1.content.0"),
    ("chat", ("messages", 2, "tool_calls"), {"id": "c"}, "messages.2.tool_calls"),
    ("chat", ("messages", 2, "tool_calls", 0, "function"), 1, "messages.2.tool_calls.0.function"),
    ("chat", ("messages", 2, "tool_calls", 0, "function", "arguments"), 1, "messages.2.tool_calls.0.function.arguments"),
    ("chat", ("messages", 3, "tool_call_id"), 5, "messages.3.tool_call_id"),
    ("chat", ("max_completion_tokens",), True, "max_completion_tokens"),
    ("responses", ("instructions",), 0.5, "instructions"),
    ("responses", ("input",), 3, "input"),
    ("responses", ("input", 0, "content"), 3, "input.0.content"),
    ("responses", ("input", 3, "content"), True, "input.3.content"),
    ("responses", ("input", 0, "role"), ["user"], "input.0.role"),
    ("responses", ("input", 1, "arguments"), 7, "input.1.arguments"),
    ("responses", ("input", 2, "output"), {"x": 1}, "input.2.output"),
    ("responses", ("tools", 0, "parameters"), "object", "tools.0.parameters"),
    ("responses", ("tools", 0, "type"), None, "tools.0.type"),
    ("anthropic", ("tools", 0, "type"), None, "tools.0.type"),
    ("responses", ("max_output_tokens",), -1, "max_output_tokens"),
]  # fmt: skip


@pytest.mark.parametrize(("where", "path", "value", "field"), WRONG_TYPES)
def test_proxy_gate_refuses_wrong_types_naming_the_field(key, where, path, value, field):
    assert refused(key, where, mutated(where, path, value)) == field


@pytest.mark.parametrize("where", ["anthropic", "chat", "responses"])
def test_proxy_gate_an_invalid_tool_schema_writes_nothing(key, where):
    path = {
        "anthropic": ("tools", 0, "input_schema", "properties", "path", "type"),
        "chat": ("tools", 0, "function", "parameters", "properties", "path", "type"),
        "responses": ("tools", 0, "parameters", "properties", "path", "type"),
    }[where]
    assert refused(key, where, mutated(where, path, 5)).startswith("tools.0")


@pytest.mark.parametrize("where", ["anthropic", "count", "chat", "responses"])
def test_proxy_gate_the_seeds_are_accepted(key, where):
    response = post(key, where, json.dumps(SEEDS[where]).encode())
    assert response.status_code == 200, response.text[:300]


@pytest.mark.parametrize("where", ["anthropic", "chat", "responses"])
def test_proxy_gate_a_refused_first_call_leaves_no_session(key, where):
    # The body's types are right; the append refuses the tool result that answers no call.
    path = {
        "anthropic": ("messages", 2, "content", 0, "tool_use_id"),
        "chat": ("messages", 3, "tool_call_id"),
        "responses": ("input", 2, "call_id"),
    }[where]
    assert refused(key, where, mutated(where, path, "no_such_call")).startswith("messages")


def test_proxy_gate_utf16_body_is_read(key):
    response = post(key, "anthropic", json.dumps(fb.ANTHROPIC).encode("utf-16"))
    assert response.status_code == 200, response.text[:300]


@pytest.mark.parametrize("where", ["anthropic", "count", "chat", "responses"])
def test_proxy_gate_a_body_over_the_limit_is_a_413_after_reading(key, where, settings):
    settings.CONTEXTSVC_MAX_JSON_BODY = 4096
    raw = mutated(where, ("model",), "m" * 5000)
    field = refused(key, where, raw, status=413)
    assert field == "body"
    assert "4096 bytes" in post(key, where, raw).text


def _asgi(path: str, headers: list[tuple[bytes, bytes]], chunks: list[bytes]):
    """Run the ASGI app on one request; (status, body, how many chunks it read)."""
    pending = list(chunks)
    read = []
    sent: list[dict] = []

    async def receive():
        if not pending:
            return {"type": "http.disconnect"}
        chunk = pending.pop(0)
        read.append(chunk)
        return {"type": "http.request", "body": chunk, "more_body": bool(pending)}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("localhost", 80),
    }
    async_to_sync(application)(scope, receive, send)
    status = sent[0]["status"]
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return status, json.loads(body), len(read)


@pytest.mark.parametrize(("where", "param"), [("anthropic", None), ("chat", "body")])
def test_proxy_gate_33_mib_declared_is_a_413_before_the_body_is_read(key, where, param):
    size = 33 * 1024 * 1024
    headers = [(b"content-length", str(size).encode()), (b"x-contextsvc-key", key.encode())]
    status, body, chunks_read = _asgi(PATHS[where], headers, [b"{" * 65536] * 8)
    assert status == 413
    assert chunks_read == 0
    assert str(32 * 1024 * 1024) in json.dumps(body)
    if param:
        assert body["error"]["param"] == param
    else:
        assert body["type"] == "error"


def test_proxy_gate_an_undeclared_body_is_counted_as_it_arrives(key, settings):
    settings.CONTEXTSVC_MAX_JSON_BODY = 100_000
    headers = [(b"x-contextsvc-key", key.encode())]
    status, body, chunks_read = _asgi(PATHS["anthropic"], headers, [b" " * 65536] * 8)
    assert status == 413 and chunks_read == 2
    assert "100000 bytes" in body["error"]["message"]


NEW_TURNS = {
    "anthropic": [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_2", "name": "read_file", "input": fb.deep(500)}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "x"}]},
    ],
    "chat": [
        {"role": "assistant", "content": "ok", "metadata": fb.deep(500)},
        {"role": "user", "content": "and?"},
    ],
    "responses": [
        {"role": "assistant", "content": [{"type": "output_text", "text": "ok", "x": fb.deep(500)}]},
        {"role": "user", "content": "and?"},
    ],
}  # fmt: skip


@pytest.mark.parametrize("where", ["anthropic", "chat", "responses"])
def test_proxy_gate_checks_what_is_new_in_a_known_conversation(key, where):
    seed = copy.deepcopy(SEEDS[where])
    assert post(key, where, json.dumps(seed).encode()).status_code == 200
    field = "messages" if where != "responses" else "input"
    history = seed[field]
    history.extend(NEW_TURNS[where])
    named = refused(key, where, json.dumps(seed).encode())
    assert named == f"{field}.{len(history) - 2}", named
