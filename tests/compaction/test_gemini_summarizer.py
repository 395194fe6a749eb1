"""The Gemini summariser against the local fake Gemini API (plain httpx, ``base_url``).

The fake (``fakes.gemini_server``) is a real HTTP server that refuses what the
API refuses (``fakes.gemini_rules``); the summariser's bodies — its own request
and the session's cached prefix — must pass those rules. Its errors map like
the SDK-backed summarisers': 429 / 5xx / timeouts are retried (by the
summariser, then by the run's task), a bad request, a bad key or a refusal is
not; a failed run leaves the session exactly as it was.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from typing import Any

import httpx
import pytest

from compaction import summarizers
from compaction.services.execute import RetryableCompactionError, compaction_execute
from compaction.services.requests import compaction_request
from compaction.services.sync import compaction_run_sync
from compaction.summarizer_gemini import GeminiSummarizer, model_path, server_delay
from contextsvc.engine.build import ContextParts, build_request
from contextsvc.engine.messages import Message, ToolDef
from contextsvc.engine.offline_summarizer import OfflineSummarizer
from contextsvc.engine.summarize import (
    SUMMARY_SYSTEM,
    PromptConfig,
    SummarizerError,
    build_interrupt,
    make_compress_request,
    make_retain_summary_request,
)
from contextsvc.engine.wellformed import NO_RESULT_TEXT
from fakes.gemini_rules import COUNT_RULE, validate
from fakes.gemini_server import FakeGemini
from fakes.streams import ScriptedReply
from sessions.models import Session
from sessions.services.append import session_append_messages
from tests.sessions.test_api_inputs import assert_names

from .conftest import turn
from .test_anthropic_summarizer import trailing_call_history
from .test_leases import ROOT, _settings_in_subprocess

pytestmark = pytest.mark.django_db

MODEL = "gemini-fake-pro"
DIRECTIVES = ["Keep every file path verbatim"]
LEGACY = {"compaction": {"summary_reuse_cache": False, "pin_task": False}}


def _summarizer(fake: FakeGemini, **kw: Any) -> GeminiSummarizer:
    kw.setdefault("max_retries", 0)
    return GeminiSummarizer(api_key="test-key", base_url=fake.base_url, **kw)


def _request(model: str = "gemini-fake-flash"):
    return make_retain_summary_request(
        trailing_call_history(), PromptConfig(), model=model, max_tokens=200
    )


def _run(session):
    run, _ = compaction_request(
        session=session,
        trigger="manual",
        reason={"kind": "manual"},
        strategy="summarize",
        enqueue=False,
    )
    return run


def _row(session) -> dict[str, Any]:
    return Session.objects.filter(pk=session.pk).values().get()


def test_naive_history_is_refused_and_the_summary_request_passes(fake_gemini):
    history = trailing_call_history()
    interrupt = Message(role="user", content=build_interrupt(PromptConfig()))
    assembled = build_request(
        "gemini",
        ContextParts(
            model=MODEL,
            max_output_tokens=200,
            messages=[*history, interrupt],
            tools=[ToolDef("bash", "run", {"type": "object"}), ToolDef("read", "read", {})],
        ),
    )
    validate(assembled)  # the assembler answers the trailing call ("no result")
    naive = copy.deepcopy(assembled)
    for content in naive["contents"]:
        content["parts"] = [p for p in content["parts"] if NO_RESULT_TEXT not in str(p)]
    url = f"{fake_gemini.base_url}/v1beta/models/{MODEL}:generateContent"
    refused = httpx.post(url, json=naive, headers={"x-goog-api-key": "test-key"})
    assert refused.status_code == 400 and COUNT_RULE in refused.json()["error"]["message"]

    request = make_retain_summary_request(
        history,
        PromptConfig(summary_directives=tuple(DIRECTIVES)),
        model="gemini-fake-flash",
        max_tokens=200,
    )
    result = _summarizer(fake_gemini).complete(request)
    assert "<summary>" in result.text and "<retain>" in result.text
    assert (result.model, result.summarizer) == ("gemini-fake-flash", "gemini")
    assert result.input_tokens > 0 and result.output_tokens > 0
    sent = fake_gemini.generate_requests()[-1]
    assert sent.status == 200
    assert sent.path == "/v1beta/models/gemini-fake-flash:generateContent"  # no ?key= in URLs
    assert sent.headers["x-goog-api-key"] == "test-key"
    body = sent.body
    validate(body)
    assert set(body) == {"contents", "systemInstruction", "generationConfig"}
    assert body["systemInstruction"] == {"parts": [{"text": SUMMARY_SYSTEM}]}
    assert body["generationConfig"] == {"maxOutputTokens": 200}
    roles = [c["role"] for c in body["contents"]]
    assert roles[0] == "user" and roles[-1] == "user" and set(roles) <= {"user", "model"}
    kinds = {k for c in body["contents"] for p in c["parts"] for k in p}
    assert kinds == {"text"}  # calls and results rendered as text
    assert "- Keep every file path verbatim" in body["contents"][-1]["parts"][-1]["text"]
    flat = str(body["contents"])
    assert "Let me look at the parser." in flat and "id=t2" not in flat


def test_compress_request_is_one_user_turn(fake_gemini):
    request = make_compress_request(
        trailing_call_history(), PromptConfig(), model="gemini-fake-flash", max_tokens=50
    )
    result = _summarizer(fake_gemini).complete(request)
    assert result.text.startswith("Fake Gemini answer.")
    contents = fake_gemini.generate_requests()[-1].body["contents"]
    assert [c["role"] for c in contents] == ["user"]
    assert contents[0]["parts"][0]["text"].startswith("Summarize this conversation excerpt")


def test_service_compaction_with_the_summarisers_own_request(fake_gemini, session_factory):
    session = session_factory(4, model=MODEL, policy=LEGACY)
    run = compaction_run_sync(run=_run(session))
    assert run.status == "succeeded", run.error
    # A Gemini session with a Gemini key: the gemini summariser, its cheap model.
    assert (run.summarizer, run.model) == ("gemini", "gemini-fake-flash")
    (sent,) = fake_gemini.generate_requests()
    assert sent.path == "/v1beta/models/gemini-fake-flash:generateContent"
    assert "tools" not in sent.body
    session.refresh_from_db()
    assert session.summary.startswith("Fake summary of")
    assert session.retain.startswith("- First request:")


def test_service_compaction_re_reads_the_sessions_cached_prefix(
    fake_gemini, session_factory, alice
):
    # The default: the session's own context (its tools and tool turns) with the instruction
    # last, calls forbidden — the body the fake checks as the API would.
    session = session_factory(0, model=MODEL)
    tool = {"name": "bash", "description": "Run a command", "input_schema": {"type": "object"}}
    assert alice.put(f"sessions/{session.external_id}/tools", [tool]).status_code == 200
    for t in range(4):
        session_append_messages(session=session, messages=turn(t))
    run = compaction_run_sync(run=_run(session))
    assert run.status == "succeeded", run.error
    (sent,) = fake_gemini.generate_requests()
    body = sent.body
    validate(body)
    kinds = {k for c in body["contents"] for p in c["parts"] for k in p}
    assert {"functionCall", "functionResponse"} <= kinds
    assert body["tools"][0]["functionDeclarations"][0]["name"] == "bash"
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "NONE"}}
    assert "<summary>" in body["contents"][-1]["parts"][-1]["text"]
    session.refresh_from_db()
    assert "Fake summary of" in session.summary


@pytest.mark.parametrize("status", [429, 500, 503])
def test_rate_limits_and_server_errors_are_retried(fake_gemini, session_factory, status):
    fake_gemini.fail_next(status)
    run = compaction_run_sync(run=_run(session_factory(4, model=MODEL, policy=LEGACY)))
    assert run.status == "succeeded", run.error
    assert [r.status for r in fake_gemini.generate_requests()] == [status, 200]


@pytest.mark.parametrize("status", [429, 500])
def test_transient_errors_requeue_the_run_for_a_task_retry(fake_gemini, session_factory, status):
    fake_gemini.fail_next(status, count=2)  # the summariser's own retry (max_retries=1) too
    session = session_factory(4, model=MODEL, policy=LEGACY)
    before = _row(session)
    run = _run(session)
    with pytest.raises(RetryableCompactionError):
        compaction_execute(run_id=run.pk, task_id="t", can_retry=True)
    run.refresh_from_db()
    assert run.status == "queued" and run.error_code == "SERVICE_UNAVAILABLE"
    assert _row(session) == before
    run = compaction_execute(run_id=run.pk, task_id="t", can_retry=True)
    assert run.status == "succeeded" and run.summarizer == "gemini"


def test_bad_request_is_not_retried_and_fails_the_run_cx_nt3(fake_gemini, session_factory):
    fake_gemini.fail_next(400, message="models/gemini-nope is not found for API version v1beta")
    session = session_factory(4, model=MODEL, policy=LEGACY)
    before = _row(session)
    run = compaction_execute(run_id=_run(session).pk, task_id="t", can_retry=True)
    assert run.status == "failed" and run.error_code == "SERVICE_UNAVAILABLE"
    assert "400" in run.error and "gemini-nope" in run.error
    assert [r.status for r in fake_gemini.generate_requests()] == [400]
    assert _row(session) == before


@pytest.mark.parametrize("finish", ["SAFETY", "RECITATION", "PROHIBITED_CONTENT"])
def test_a_refused_answer_fails_the_run_and_leaves_the_session(
    fake_gemini, session_factory, finish
):
    # Text that looks like a summary, but the model stopped for a reason that is no answer.
    fake_gemini.script(ScriptedReply(text="<summary>partial", stop_reason=finish))
    session = session_factory(4, model=MODEL, policy=LEGACY)
    before = _row(session)
    run = compaction_execute(run_id=_run(session).pk, task_id="t", can_retry=True)
    assert run.status == "failed" and run.error_code == "SERVICE_UNAVAILABLE"
    assert finish in run.error
    assert len(fake_gemini.generate_requests()) == 1  # a refusal is not retried
    assert _row(session) == before


class BlockingFake(FakeGemini):
    """Answers every request as the API answers a blocked prompt: no candidates."""

    def respond(self, body: dict[str, Any], model: str, number: int) -> dict[str, Any]:
        response = super().respond(body, model, number)
        return {
            "promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
            "usageMetadata": response["usageMetadata"],
            "modelVersion": model,
        }


def test_a_blocked_prompt_is_a_refusal_not_an_empty_summary():
    with BlockingFake(api_key="test-key") as fake:
        with pytest.raises(SummarizerError, match="blocked \\(PROHIBITED_CONTENT\\)") as err:
            _summarizer(fake).complete(_request())
    assert not err.value.transient


def test_timeout_is_transient(fake_gemini):
    fake_gemini.hang_next(3)
    with pytest.raises(SummarizerError, match="timed out") as err:
        _summarizer(fake_gemini, timeout=0.5).complete(_request())
    assert err.value.transient


def test_bad_key_is_not_transient(fake_gemini):
    summarizer = GeminiSummarizer(api_key="wrong", base_url=fake_gemini.base_url, max_retries=0)
    with pytest.raises(SummarizerError, match="API key not valid") as err:
        summarizer.complete(_request())
    assert err.value.status == 400 and not err.value.transient


def test_unreachable_server_is_transient_after_the_retries():
    waits: list[float] = []
    summarizer = GeminiSummarizer(
        api_key="k", base_url="http://127.0.0.1:9", max_retries=2, timeout=2, sleep=waits.append
    )
    with pytest.raises(SummarizerError, match="unreachable") as err:
        summarizer.complete(_request())
    assert err.value.transient
    assert len(waits) == 2 and 0.3 < waits[0] < waits[1] <= 1.0  # backoff: 0.5 s, then 1 s


def test_the_servers_delay_is_honoured_up_to_a_minute():
    def answer(headers: dict[str, str], delay: str | None = None) -> httpx.Response:
        error: dict[str, Any] = {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}
        if delay:
            error["details"] = [
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}
            ]
        return httpx.Response(429, headers=headers, json={"error": error})

    assert server_delay(answer({"retry-after": "3"})) == 3.0
    assert server_delay(answer({}, "37s")) == 37.0
    assert server_delay(answer({}, "0.25s")) == 0.25
    assert server_delay(answer({})) is None
    assert server_delay(answer({}, "soon")) is None


def test_the_model_goes_in_the_url_bare():
    assert model_path("gemini-2.5-flash") == "gemini-2.5-flash"
    assert model_path("google/gemini-2.5-pro") == "gemini-2.5-pro"
    assert model_path("models/gemini-2.5-pro") == "gemini-2.5-pro"
    assert model_path("a/b:c") == "a%2Fb%3Ac"  # never another path or method


def test_selection(settings, fake_gemini):
    settings.CONTEXTSVC_SUMMARIZER_ANTHROPIC_API_KEY = "k"
    settings.CONTEXTSVC_SUMMARIZER_OPENAI_API_KEY = "k"
    pick = summarizers.for_session
    # auto: a Gemini model (or a Google session) with a Gemini key → gemini.
    assert isinstance(pick(model="gemini-2.5-pro"), GeminiSummarizer)
    assert isinstance(pick(model="google/gemini-2.5-pro"), GeminiSummarizer)
    assert isinstance(pick(model="my-tuned-model", provider="google"), GeminiSummarizer)
    assert isinstance(pick(model="claude-sonnet-4-5"), summarizers.AnthropicSummarizer)
    assert isinstance(pick(model="gpt-4o", provider="openai"), summarizers.OpenAISummarizer)
    # A policy model naming Gemini on a Claude session goes to Gemini, not Anthropic.
    assert isinstance(pick(model="gemini-2.5-flash", provider="anthropic"), GeminiSummarizer)
    # Forced by the setting, or per session.
    assert isinstance(pick(model="gemini-2.5-pro", choice="offline"), OfflineSummarizer)
    assert isinstance(pick(model="claude-sonnet-4-5", choice="gemini"), GeminiSummarizer)
    # Without its key: auto falls through; forced is an error, not a silent fallback.
    settings.CONTEXTSVC_SUMMARIZER_GEMINI_API_KEY = None
    assert isinstance(pick(model="gemini-2.5-pro"), summarizers.OpenAISummarizer)
    settings.CONTEXTSVC_SUMMARIZER_OPENAI_API_KEY = None
    assert isinstance(pick(model="gemini-2.5-pro", provider="google"), OfflineSummarizer)
    settings.CONTEXTSVC_SUMMARIZER = "gemini"
    with pytest.raises(SummarizerError, match="gemini summariser has no key"):
        pick(model="gemini-2.5-pro")


def test_summary_model_policy_then_summariser_then_session(fake_gemini, session_factory):
    session = session_factory(
        4, model=MODEL, policy={"compaction": {"model": "gemini-fake-pro", **LEGACY["compaction"]}}
    )
    run = compaction_run_sync(run=_run(session))
    assert (run.summarizer, run.model) == ("gemini", "gemini-fake-pro")
    assert fake_gemini.generate_requests()[0].path.startswith("/v1beta/models/gemini-fake-pro:")
    session_model = GeminiSummarizer(api_key="k", model="session")
    assert summarizers.summary_model(session_model, policy_model=None, session_model=MODEL) == MODEL


def test_gemini_in_the_policy_is_accepted_and_an_unknown_one_named(alice, make_session):
    sid = make_session()["id"]
    ok = alice.patch(f"sessions/{sid}", {"policy": {"compaction": {"summarizer": "gemini"}}})
    assert ok.status_code == 200, ok.content
    assert ok.json()["policy"]["compaction"]["summarizer"] == "gemini"
    patch = {"policy": {"compaction": {"summarizer": "google"}}}
    assert_names(alice.patch(f"sessions/{sid}", patch), "policy.compaction.summarizer")


def test_the_key_falls_back_to_gemini_api_key(tmp_path):
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.CONTEXTSVC_SUMMARIZER_GEMINI_API_KEY, s.CONTEXTSVC_SUMMARIZER_GEMINI_BASE_URL,"
        " s.CONTEXTSVC_SUMMARIZER_GEMINI_MODEL)"
    )
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CONTEXTSVC_", "CELERY_")) and k != "GEMINI_API_KEY"
    }
    env = {
        **clean,
        "DJANGO_SETTINGS_MODULE": "contextsvc.settings",
        "CONTEXTSVC_VAR_DIR": str(tmp_path),
        "GEMINI_API_KEY": "from-gemini-cli-env",
    }
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "from-gemini-cli-env",
        "https://generativelanguage.googleapis.com",
        "gemini-2.5-flash-lite",
    ]


@pytest.mark.parametrize(
    ("name", "value"),
    [("CONTEXTSVC_SUMMARIZER_GEMINI_BASE_URL", "generativelanguage.googleapis.com")],
)
def test_a_bad_gemini_url_fails_loudly_at_start_up(tmp_path, name, value):
    done = _settings_in_subprocess(CONTEXTSVC_VAR_DIR=str(tmp_path), **{name: value})
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and name in done.stderr
