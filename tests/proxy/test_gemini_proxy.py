"""The Gemini proxy (``/proxy/gemini/v1beta/…``) in process, over plain HTTP, against the fake API."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from fakes.gemini_server import FakeGemini
from fakes.streams import ScriptedReply, tool_call
from sessions.models import Message, Session, UsageReport
from tests.proxy.conftest import PROXY_DB, UPSTREAM_KEY, asgi_http

pytestmark = PROXY_DB

MODEL = "gemini-fake-pro"
BASE = "http://localhost/proxy/gemini/v1beta"
CACHED = 7
TOOLS = [
    {
        "functionDeclarations": [
            {
                "name": "run_shell_command",
                "description": "Run a shell command",
                "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
            }
        ]
    }
]
SYSTEM = {"parts": [{"text": "You are a coding agent."}]}


class CachingFake(FakeGemini):
    """The fake, reporting part of every prompt as read from its cache."""

    def respond(self, body: dict[str, Any], model: str, number: int) -> dict[str, Any]:
        response = super().respond(body, model, number)
        response["usageMetadata"]["cachedContentTokenCount"] = CACHED
        return response


@pytest.fixture
def fake_gemini(settings):
    with CachingFake(api_key=UPSTREAM_KEY) as fake:
        settings.CONTEXTSVC_UPSTREAM_GEMINI_URL = fake.base_url
        settings.CONTEXTSVC_UPSTREAM_GEMINI_API_KEY = None
        yield fake


def _deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def _headers(agent_key: str, session: str) -> dict[str, str]:
    return {
        "x-goog-api-key": UPSTREAM_KEY,
        "X-Contextsvc-Key": agent_key,
        "X-Contextsvc-Session": session,
    }


def _sse_chunks(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


def _parts(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A stream's parts, as a client puts them together (text pieces joined)."""
    parts: list[dict[str, Any]] = []
    for chunk in chunks:
        for part in chunk["candidates"][0]["content"]["parts"]:
            if parts and "text" in part and set(parts[-1]) == {"text"} and set(part) == {"text"}:
                parts[-1] = {"text": parts[-1]["text"] + part["text"]}
            else:
                parts.append(part)
    return parts


async def _turn(client, streamed: bool, body: dict[str, Any], headers: dict[str, str]):
    if streamed:
        url = f"{BASE}/models/{MODEL}:streamGenerateContent?alt=sse"
        response = await client.post(url, json=body, headers=headers)
        assert response.status_code == 200, response.text
        assert "text/event-stream" in response.headers["content-type"]
        return response, _parts(_sse_chunks(response.text))
    response = await client.post(
        f"{BASE}/models/{MODEL}:generateContent", json=body, headers=headers
    )
    assert response.status_code == 200, response.text
    return response, response.json()["candidates"][0]["content"]["parts"]


@pytest.mark.parametrize("streamed", [False, True])
def test_a_function_call_loop_is_answered_and_stored_once(fake_gemini, alice_key, streamed):
    fake_gemini.script(
        ScriptedReply(
            text="Listing.", tool_calls=[tool_call("run_shell_command", {"command": "ls"})]
        ),
        ScriptedReply(text="There are two files."),
    )
    sid = f"ses_gem_{'s' if streamed else 'w'}"
    headers = _headers(alice_key[1], sid)

    async def loop():
        async with asgi_http() as client:
            contents = [{"role": "user", "parts": [{"text": "list the files"}]}]
            body = {"contents": contents, "systemInstruction": SYSTEM, "tools": TOOLS}
            first, parts = await _turn(client, streamed, body, headers)
            contents.append({"role": "model", "parts": parts})
            call = next(p["functionCall"] for p in parts if "functionCall" in p)
            result = {"name": call["name"], "response": {"output": "a.py\nb.py"}}
            contents.append({"role": "user", "parts": [{"functionResponse": result}]})
            second, parts2 = await _turn(client, streamed, body, headers)
            return first, parts, second, parts2

    first, parts, second, parts2 = async_to_sync(loop)()
    assert [p.get("text") for p in parts if "text" in p] == ["Listing."]
    assert parts[-1]["functionCall"]["name"] == "run_shell_command"
    assert parts2 == [{"text": "There are two files."}]
    assert first.headers["x-contextsvc-session"] == sid
    session = Session.objects.get(external_id=sid)
    assert session.model == MODEL and session.provider == "google"
    rows = list(
        Message.objects.filter(session=session).order_by("seq").values_list("role", flat=True)
    )
    assert rows == ["user", "assistant", "tool", "assistant"]
    reports = list(UsageReport.objects.filter(session=session).order_by("id"))
    assert len(reports) == 2
    assert all(r.cache_read_tokens == CACHED for r in reports)
    assert all(r.input_tokens > 0 and r.output_tokens > 0 for r in reports)
    sent = fake_gemini.generate_requests()
    assert len(sent) == 2
    method = "streamGenerateContent" if streamed else "generateContent"
    assert all(r.path.startswith(f"/v1beta/models/{MODEL}:{method}") for r in sent)
    assert all("model" not in r.body for r in sent)
    assert all(r.headers.get("x-goog-api-key") == UPSTREAM_KEY for r in sent)
    assert "x-contextsvc-key" not in sent[-1].headers
    # the managed body carries the pair the fake checks (call then its response)
    assert [c["role"] for c in sent[-1].body["contents"]] == ["user", "model", "user"]


def test_the_output_limit_is_the_sessions_and_no_model_goes_upstream(fake_gemini, alice_key):
    async def call():
        async with asgi_http() as client:
            return await client.post(
                f"{BASE}/models/{MODEL}:generateContent",
                json={
                    "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                    "generationConfig": {"maxOutputTokens": 1234, "temperature": 0.1},
                },
                headers=_headers(alice_key[1], "ses_glimit"),
            )

    response = async_to_sync(call)()
    assert response.status_code == 200, response.text
    assert Session.objects.get(external_id="ses_glimit").max_output_tokens == 1234
    sent = fake_gemini.generate_requests()[-1].body
    assert sent["generationConfig"] == {"maxOutputTokens": 1234, "temperature": 0.1}
    assert "model" not in sent and "max_tokens" not in sent


def test_a_window_too_small_for_one_call_names_geminis_output_limit(fake_gemini, alice_key):
    """The 400 says how a Gemini client lowers its output (not another API's field)."""
    Session.objects.create(
        owner=alice_key[0], external_id="ses_gsmall", model=MODEL, context_window=9_000,
        max_output_tokens=7_000, buffer_tokens=1_000,
    )  # fmt: skip
    system = {"parts": [{"text": "Follow the rules. " * 600}]}

    async def call():
        async with asgi_http() as client:
            return await client.post(
                f"{BASE}/models/{MODEL}:generateContent",
                json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                      "systemInstruction": system},
                headers=_headers(alice_key[1], "ses_gsmall"),
            )  # fmt: skip

    response = async_to_sync(call)()
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert "generationConfig.maxOutputTokens" in error["message"]
    assert "CLAUDE_CODE" not in error["message"] and "9,000" in error["message"]
    assert fake_gemini.generate_requests() == []


def test_the_key_in_the_query_is_passed_through_as_a_header(fake_gemini, alice_key):
    async def call():
        async with asgi_http() as client:
            return await client.post(
                f"{BASE}/models/{MODEL}:generateContent?key={UPSTREAM_KEY}",
                json={"contents": [{"parts": [{"text": "hi"}]}]},
                headers={"X-Contextsvc-Key": alice_key[1], "X-Contextsvc-Session": "ses_gq"},
            )

    response = async_to_sync(call)()
    assert response.status_code == 200, response.text
    sent = fake_gemini.generate_requests()[-1]
    assert sent.headers["x-goog-api-key"] == UPSTREAM_KEY
    assert "key=" not in sent.path


def test_managed_credentials_use_the_server_key(fake_gemini, alice_key, settings):
    settings.CONTEXTSVC_UPSTREAM_GEMINI_API_KEY = UPSTREAM_KEY

    async def call():
        async with asgi_http() as client:
            return await client.post(
                f"{BASE}/models/{MODEL}:generateContent",
                json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
                headers={"x-goog-api-key": alice_key[1]},
            )

    response = async_to_sync(call)()
    assert response.status_code == 200, response.text
    assert fake_gemini.generate_requests()[-1].headers["x-goog-api-key"] == UPSTREAM_KEY
    assert response.headers["x-contextsvc-session"].startswith("px_")


@pytest.mark.parametrize(
    "body",
    [
        {"contents": []},
        {"contents": [{"role": "system", "parts": [{"text": "x"}]}]},
        {"contents": [{"role": "user", "parts": "hi"}]},
        {"contents": [{"role": "user", "parts": [{"functionCall": {"name": 3}}]}]},
        {"contents": "hi"},
        {"contents": [{"parts": [{"text": "x"}]}], "tools": [{"functionDeclarations": [{}]}]},
        {"contents": [{"parts": [{"text": "x"}]}], "systemInstruction": {"parts": [1]}},
        {"contents": [{"role": "user", "parts": [{"text": None}]}]},
        {
            "contents": [{"parts": [{"text": "x"}]}],
            "tools": [{"functionDeclarations": [{"name": "ls"}], "x": _deep(300)}],
        },
    ],
)
def test_a_bad_body_is_a_gemini_400_and_writes_nothing(fake_gemini, alice_key, body):
    async def call():
        async with asgi_http() as client:
            return await client.post(
                f"{BASE}/models/{MODEL}:generateContent",
                json=body,
                headers=_headers(alice_key[1], "ses_gbad"),
            )

    response = async_to_sync(call)()
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT" and error["message"]
    assert not Session.objects.filter(external_id="ses_gbad").exists()
    assert fake_gemini.generate_requests() == []


def test_overflow_compacts_and_asks_again(fake_gemini, alice_key):
    async def call(text: str):
        async with asgi_http() as client:
            return await client.post(
                f"{BASE}/models/{MODEL}:generateContent",
                json={"contents": [{"role": "user", "parts": [{"text": text}]}]},
                headers=_headers(alice_key[1], "ses_gover"),
            )

    fake_gemini.fail_next(
        400,
        message="The input token count (40000) exceeds the maximum number of tokens allowed (30000).",
    )
    response = async_to_sync(call)("hello")
    assert response.status_code == 200, response.text
    assert len(fake_gemini.generate_requests()) == 2
    session = Session.objects.get(external_id="ses_gover")
    # The profile's 65,536-token output limit would not fit the window upstream named.
    assert (session.context_window, session.max_output_tokens) == (30000, 30000 // 4)


def test_models_and_count_tokens_are_passed_through(fake_gemini, alice_key):
    headers = _headers(alice_key[1], "ses_gcount")

    async def calls():
        async with asgi_http() as client:
            models = await client.get(f"{BASE}/models", headers=headers)
            count = await client.post(
                f"{BASE}/models/{MODEL}:countTokens",
                json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
                headers=headers,
            )
            missing = await client.post(f"{BASE}/models/{MODEL}:nothing", json={}, headers=headers)
            return models, count, missing

    models, count, missing = async_to_sync(calls)()
    assert models.status_code == 200 and models.json()["models"][0]["name"].startswith("models/")
    assert count.status_code == 200 and count.json()["totalTokens"] > 0
    assert missing.status_code == 404 and missing.json()["error"]["status"] == "NOT_FOUND"


def test_a_stream_upstream_cuts_is_relayed_and_stored_incomplete(fake_gemini, alice_key):
    fake_gemini.script(ScriptedReply(text="one two three four five six seven eight nine ten"))
    fake_gemini.cut_next(after=3)

    async def call():
        async with asgi_http() as client:
            return await client.post(
                f"{BASE}/models/{MODEL}:streamGenerateContent?alt=sse",
                json={"contents": [{"role": "user", "parts": [{"text": "count"}]}]},
                headers=_headers(alice_key[1], "ses_gcut"),
            )

    response = async_to_sync(call)()
    assert response.status_code == 200
    relayed = "".join(p["text"] for p in _parts(_sse_chunks(response.text)))
    assert relayed and "ten" not in relayed
    stored = Message.objects.get(session__external_id="ses_gcut", role="assistant")
    assert relayed in json.dumps(stored.content)
    assert '"incomplete": true' in json.dumps(stored.parts)


@pytest.mark.parametrize("streamed", [False, True])
def test_a_builtin_call_is_run_by_the_proxy_and_never_reaches_the_client(
    fake_gemini, alice_key, streamed
):
    fake_gemini.script(
        ScriptedReply(tool_calls=[tool_call("tool_output_cache", {"ref_id": "out_x"})]),
        ScriptedReply(text="The answer, after reading."),
    )
    sid = f"ses_gbuiltin_{'s' if streamed else 'w'}"
    body = {"contents": [{"role": "user", "parts": [{"text": "go"}]}], "tools": TOOLS}

    async def call():
        async with asgi_http() as client:
            return await _turn(client, streamed, body, _headers(alice_key[1], sid))

    _, parts = async_to_sync(call)()
    assert parts == [{"text": "The answer, after reading."}]
    sent = fake_gemini.generate_requests()
    assert len(sent) == 2
    offered = {d["name"] for t in sent[0].body["tools"] for d in t["functionDeclarations"]}
    # (the client's own tool may be deferred behind tool_search: the profile's window is small)
    assert "tool_output_cache" in offered
    assert [c["role"] for c in sent[1].body["contents"]] == ["user", "model", "user"]
    rows = list(
        Message.objects.filter(session__external_id=sid)
        .order_by("seq")
        .values_list("role", flat=True)
    )
    assert rows == ["user", "assistant", "tool", "assistant"]
    assert UsageReport.objects.filter(session__external_id=sid).count() == 2
