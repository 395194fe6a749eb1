"""The openai summariser against a local fake Chat Completions server (the official SDK, ``base_url``).

The fake (``fakes.openai_server``) is a real HTTP server that rejects
what the API rejects (``fakes.openai_rules``); the summariser's body
must pass those rules, and its errors map like the anthropic one's:
429 / 5xx / timeouts are retried, a bad request or a bad key is not.
"""

from __future__ import annotations

import copy

import openai
import pytest
from django.core.exceptions import ImproperlyConfigured

from compaction import summarizers
from compaction.services.execute import RetryableCompactionError, compaction_execute
from compaction.services.requests import compaction_request
from compaction.services.sync import compaction_run_sync
from contextsvc.engine.build import ContextParts, build_request
from contextsvc.engine.messages import Message, ToolDef
from contextsvc.engine.offline_summarizer import OfflineSummarizer
from contextsvc.engine.summarize import (
    PromptConfig,
    SummarizerError,
    build_interrupt,
    make_compress_request,
    make_retain_summary_request,
)
from contextsvc.engine.wellformed import NO_RESULT_TEXT
from contextsvc.settings_env import env_url
from fakes.openai_rules import validate_chat
from sessions.models import Session
from tests.sessions.test_api_inputs import assert_names

from .test_anthropic_summarizer import trailing_call_history
from .test_leases import _settings_in_subprocess

pytestmark = pytest.mark.django_db

DIRECTIVES = ["Keep every file path verbatim"]


def _summarizer(fake, **kw) -> summarizers.OpenAISummarizer:
    kw.setdefault("max_retries", 0)
    return summarizers.OpenAISummarizer(api_key="test-key", base_url=f"{fake.base_url}/v1", **kw)


def _request(model: str = "gpt-fake-small"):
    return make_retain_summary_request(
        trailing_call_history(), PromptConfig(), model=model, max_tokens=200
    )


def _compact(session):
    run, _ = compaction_request(
        session=session,
        trigger="manual",
        reason={"kind": "manual"},
        strategy="summarize",
        enqueue=False,
    )
    return compaction_run_sync(run=run)


def test_naive_history_is_rejected_and_the_summary_request_passes(fake_openai):
    client = openai.OpenAI(api_key="test-key", base_url=f"{fake_openai.base_url}/v1", max_retries=0)
    history = trailing_call_history()
    interrupt = Message(role="user", content=build_interrupt(PromptConfig()))
    assembled = build_request(
        "openai",
        ContextParts(
            model="gpt-fake-small",
            max_output_tokens=200,
            messages=[*history, interrupt],
            tools=[ToolDef("bash", "run", {"type": "object"}), ToolDef("read", "read", {})],
        ),
    )
    # Naive: the trailing call without the result the assembler pairs it with.
    naive = copy.deepcopy(assembled)
    naive["messages"] = [m for m in naive["messages"] if m.get("content") != NO_RESULT_TEXT]
    with pytest.raises(openai.BadRequestError, match="did not have response messages: t2"):
        client.chat.completions.create(**naive)

    request = make_retain_summary_request(
        history,
        PromptConfig(summary_directives=tuple(DIRECTIVES)),
        model="gpt-fake-small",
        max_tokens=200,
    )
    result = _summarizer(fake_openai).complete(request)
    assert "<summary>" in result.text
    assert (result.model, result.summarizer) == ("gpt-fake-small", "openai")
    assert result.input_tokens > 0 and result.output_tokens > 0
    sent = fake_openai.chat_requests()[-1]
    assert sent.status == 200 and sent.headers["authorization"] == "Bearer test-key"
    body = sent.body
    validate_chat(body)
    assert set(body) == {"model", "max_tokens", "messages"}
    assert (body["model"], body["max_tokens"]) == ("gpt-fake-small", 200)
    roles = [m["role"] for m in body["messages"]]
    assert roles[0] == "system" and roles[1] == "user" and roles[-1] == "user"
    assert set(roles) <= {"system", "user", "assistant"}  # calls and results rendered as text
    assert not any("tool_calls" in m for m in body["messages"])
    assert "- Keep every file path verbatim" in body["messages"][-1]["content"]
    flat = str(body["messages"])
    assert "Let me look at the parser." in flat and "id=t2" not in flat


def test_compress_request_is_one_user_message_after_the_system(fake_openai):
    request = make_compress_request(
        trailing_call_history(), PromptConfig(), model="m", max_tokens=50
    )
    _summarizer(fake_openai).complete(request)
    messages = fake_openai.chat_requests()[-1].body["messages"]
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[1]["content"].startswith("Summarize this conversation excerpt concisely.")


def test_service_compaction_through_the_sdk_with_the_default_model(fake_openai, session_factory):
    # A Claude session, no Anthropic key: openai is the one configured. The
    # summariser's own request and retain (docs/concepts/compaction.md#retain-summary).
    legacy = {"compaction": {"summary_reuse_cache": False, "pin_task": False}}
    session = session_factory(4, policy=legacy)
    run = _compact(session)
    assert run.status == "succeeded", run.error
    assert (run.summarizer, run.model) == ("openai", "gpt-4.1-mini")
    (sent,) = fake_openai.chat_requests()
    assert sent.body["model"] == "gpt-4.1-mini"  # the summariser's cheap default, not the agent's
    session.refresh_from_db()
    assert session.summary.startswith("Fake summary of")
    assert session.retain.startswith("- First request:")


@pytest.mark.parametrize("status", [429, 500, 503])
def test_sdk_retries_rate_limits_and_server_errors(fake_openai, session_factory, status):
    fake_openai.fail_next(status)
    run = _compact(session_factory(4))
    assert run.status == "succeeded", run.error
    assert [r.status for r in fake_openai.chat_requests()] == [status, 200]


@pytest.mark.parametrize("status", [429, 500])
def test_transient_errors_requeue_the_run_for_a_task_retry(fake_openai, session_factory, status):
    fake_openai.fail_next(status, count=2)  # the SDK's own retry (max_retries=1) also fails
    session = session_factory(4)
    before = Session.objects.filter(pk=session.pk).values().get()
    run, _ = compaction_request(
        session=session,
        trigger="manual",
        reason={"kind": "manual"},
        strategy="summarize",
        enqueue=False,
    )
    with pytest.raises(RetryableCompactionError):
        compaction_execute(run_id=run.pk, task_id="t", can_retry=True)
    run.refresh_from_db()
    assert run.status == "queued" and run.error_code == "SERVICE_UNAVAILABLE"
    assert Session.objects.filter(pk=session.pk).values().get() == before
    run = compaction_execute(run_id=run.pk, task_id="t", can_retry=True)
    assert run.status == "succeeded" and run.summarizer == "openai"


def test_bad_request_is_not_retried_and_fails_the_run_cx_nt3(fake_openai, session_factory):
    fake_openai.fail_next(400, message="The model `gpt-nope` does not exist")
    session = session_factory(4)
    before = Session.objects.filter(pk=session.pk).values().get()
    run, _ = compaction_request(
        session=session,
        trigger="manual",
        reason={"kind": "manual"},
        strategy="summarize",
        enqueue=False,
    )
    run = compaction_execute(run_id=run.pk, task_id="t", can_retry=True)
    assert run.status == "failed" and run.error_code == "SERVICE_UNAVAILABLE"
    assert "400" in run.error and "gpt-nope" in run.error
    assert [r.status for r in fake_openai.chat_requests()] == [400]  # no SDK retry either
    assert Session.objects.filter(pk=session.pk).values().get() == before


def test_timeout_is_transient(fake_openai):
    fake_openai.hang_next(3)
    with pytest.raises(SummarizerError, match="timed out") as err:
        _summarizer(fake_openai, timeout=0.5).complete(_request())
    assert err.value.transient


def test_bad_key_is_not_transient(fake_openai):
    summarizer = summarizers.OpenAISummarizer(
        api_key="wrong", base_url=f"{fake_openai.base_url}/v1", max_retries=0
    )
    with pytest.raises(SummarizerError, match="Incorrect API key") as err:
        summarizer.complete(_request())
    assert err.value.status == 401 and not err.value.transient


def test_unreachable_server_is_transient():
    summarizer = summarizers.OpenAISummarizer(
        api_key="k", base_url="http://127.0.0.1:9/v1", max_retries=0, timeout=2
    )
    with pytest.raises(SummarizerError, match="unreachable") as err:
        summarizer.complete(_request())
    assert err.value.transient


def test_a_server_without_a_key_needs_only_its_url(fake_openai, settings):
    fake_openai.api_key = "unused"  # what the summariser sends when no key is configured
    settings.CONTEXTSVC_SUMMARIZER_OPENAI_API_KEY = None
    summarizer = summarizers.for_session(model="llama3", provider="openai")
    assert isinstance(summarizer, summarizers.OpenAISummarizer)
    assert "<summary>" in summarizer.complete(_request()).text


def test_selection(settings, fake_openai):
    settings.CONTEXTSVC_SUMMARIZER_ANTHROPIC_API_KEY = "k"
    # auto: Claude models go to the Anthropic summariser, the rest to the openai one.
    assert isinstance(
        summarizers.for_session(model="claude-sonnet-4-5"), summarizers.AnthropicSummarizer
    )
    assert isinstance(
        summarizers.for_session(model="gpt-4o", provider="openai"), summarizers.OpenAISummarizer
    )
    # Forced by the setting, or per session (policy.compaction.summarizer).
    settings.CONTEXTSVC_SUMMARIZER = "openai"
    assert isinstance(
        summarizers.for_session(model="claude-sonnet-4-5"), summarizers.OpenAISummarizer
    )
    assert isinstance(
        summarizers.for_session(model="claude-sonnet-4-5", choice="offline"), OfflineSummarizer
    )
    assert isinstance(
        summarizers.for_session(model="gpt-4o", choice="anthropic"),
        summarizers.AnthropicSummarizer,
    )
    # Forced but not configured: an error, not a silent fallback.
    settings.CONTEXTSVC_SUMMARIZER_OPENAI_API_KEY = None
    settings.CONTEXTSVC_SUMMARIZER_OPENAI_BASE_URL = None
    with pytest.raises(SummarizerError, match="openai summariser is not configured"):
        summarizers.for_session(model="gpt-4o")
    settings.CONTEXTSVC_SUMMARIZER = "auto"
    assert isinstance(summarizers.for_session(model="gpt-4o", provider="openai"), OfflineSummarizer)


def test_summary_model_policy_then_summariser_then_session():
    configured = summarizers.OpenAISummarizer(model="gpt-fake-small")
    session = summarizers.OpenAISummarizer(model="session")
    assert (
        summarizers.summary_model(configured, policy_model="big", session_model="gpt-4o") == "big"
    )
    assert (
        summarizers.summary_model(configured, policy_model=None, session_model="gpt-4o")
        == "gpt-fake-small"
    )
    assert summarizers.summary_model(session, policy_model=None, session_model="gpt-4o") == "gpt-4o"
    assert (
        summarizers.summary_model(OfflineSummarizer(), policy_model=None, session_model="gpt-4o")
        == "gpt-4o"
    )


def test_anthropic_default_model_is_a_cheap_one(fake_anthropic, session_factory):
    run = _compact(session_factory(4))  # the session's model is claude-sonnet-4-5
    assert (run.summarizer, run.model) == ("anthropic", "claude-haiku-4-5")
    assert fake_anthropic.messages_requests()[0].body["model"] == "claude-haiku-4-5"


def test_policy_override_picks_the_summariser_and_model(
    fake_openai, fake_anthropic, session_factory
):
    session = session_factory(
        4, policy={"compaction": {"summarizer": "openai", "model": "gpt-fake-large"}}
    )
    run = _compact(session)  # a Claude session with an Anthropic key: the policy wins
    assert (run.summarizer, run.model) == ("openai", "gpt-fake-large")
    assert fake_openai.chat_requests()[0].body["model"] == "gpt-fake-large"
    assert not fake_anthropic.messages_requests()

    offline = _compact(session_factory(4, policy={"compaction": {"summarizer": "offline"}}))
    assert offline.status == "succeeded" and offline.summarizer == "offline"
    assert len(fake_openai.chat_requests()) == 1 and not fake_anthropic.messages_requests()


def test_unknown_summariser_in_the_policy_is_a_422_naming_the_field(alice, make_session):
    body = {"model": "gpt-4o", "policy": {"compaction": {"summarizer": "gpt"}}}
    assert_names(alice.post("sessions", body), "policy.compaction.summarizer")
    sid = make_session()["id"]
    patch = {"policy": {"compaction": {"summarizer": "llama"}}}
    assert_names(alice.patch(f"sessions/{sid}", patch), "policy.compaction.summarizer")
    ok = alice.patch(f"sessions/{sid}", {"policy": {"compaction": {"summarizer": "openai"}}})
    assert ok.status_code == 200, ok.content
    assert ok.json()["policy"]["compaction"]["summarizer"] == "openai"


def test_run_payload_names_summariser_and_model(alice, fake_openai, session_factory):
    session = session_factory(4)
    run = _compact(session)
    detail = alice.get(f"compactions/{run.pk}").json()
    assert (detail["summarizer"], detail["model"]) == ("openai", "gpt-4.1-mini")
    (listed,) = alice.get(f"sessions/{session.external_id}/compactions").json()["items"]
    assert (listed["summarizer"], listed["model"]) == ("openai", "gpt-4.1-mini")


def test_env_url_accepts_http_urls_only(monkeypatch):
    name = "CONTEXTSVC_SUMMARIZER_OPENAI_BASE_URL"
    monkeypatch.setenv(name, "http://127.0.0.1:8000/v1/")
    assert env_url(name) == "http://127.0.0.1:8000/v1"
    for bad in ("localhost:8000", "ftp://host", "http://"):
        monkeypatch.setenv(name, bad)
        with pytest.raises(ImproperlyConfigured, match=name):
            env_url(name)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CONTEXTSVC_SUMMARIZER", "llama"),
        ("CONTEXTSVC_SUMMARIZER_OPENAI_BASE_URL", "localhost:11434/v1"),
        ("CONTEXTSVC_SUMMARIZER_ANTHROPIC_BASE_URL", "api.anthropic.com"),
    ],
)
def test_bad_summariser_settings_fail_loudly_at_start_up(tmp_path, name, value):
    done = _settings_in_subprocess(CONTEXTSVC_VAR_DIR=str(tmp_path), **{name: value})
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and name in done.stderr
