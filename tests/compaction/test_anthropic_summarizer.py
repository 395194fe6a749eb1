"""The Anthropic summariser against a local fake Messages API (the official SDK, ``base_url``).

docs/concepts/compaction.md#strip-trailing-calls: summarising with a trailing assistant
``tool_calls`` breaks the call/result pairing and the API answers 400 — reproduced here with
a naive request, while the request contextsvc builds passes.
"""

from __future__ import annotations

import copy

import anthropic
import pytest

from compaction import summarizers
from compaction.models import CompactionRun
from compaction.services.execute import RetryableCompactionError, compaction_execute
from compaction.services.requests import compaction_request
from compaction.services.sync import compaction_run_sync
from contextsvc.engine.build import ContextParts, build_request
from contextsvc.engine.messages import Message, ToolCall, ToolDef
from contextsvc.engine.offline_summarizer import OfflineSummarizer
from contextsvc.engine.summarize import (
    PromptConfig,
    SummarizerError,
    build_interrupt,
    make_retain_summary_request,
)
from contextsvc.engine.wellformed import NO_RESULT_TEXT
from sessions.models import Session
from sessions.selectors import live_messages
from sessions.services.append import session_append_messages

from .conftest import turn

pytestmark = pytest.mark.django_db

DIRECTIVES = ["Keep every file path verbatim", "List open TODOs"]
RETAIN_DIRECTIVES = ["List output refs (ref=...)"]


def trailing_call_history() -> list[Message]:
    """A span whose last message is an assistant tool call with no result."""
    return [
        Message(role="user", content="Fix the failing test in src/app/parser.py"),
        Message(
            role="assistant",
            content="",
            tool_calls=(ToolCall("t1", "bash", {"command": "pytest"}),),
        ),
        Message(
            role="tool",
            content="FAILED test_parser - ValueError: bad token",
            tool_call_id="t1",
            name="bash",
        ),
        Message(
            role="assistant",
            content="Let me look at the parser.",
            tool_calls=(ToolCall("t2", "read", {"path": "src/app/parser.py"}),),
        ),
    ]


def test_naive_summary_request_is_rejected_and_ours_passes_spec000_3_4(fake_anthropic):
    history = trailing_call_history()
    prompts = PromptConfig(
        summary_directives=tuple(DIRECTIVES), retain_directives=tuple(RETAIN_DIRECTIVES)
    )
    client = anthropic.Anthropic(
        api_key="test-key", base_url=fake_anthropic.base_url, max_retries=0
    )
    tools = [
        ToolDef("bash", "run", {"type": "object"}),
        ToolDef("read", "read", {"type": "object"}),
    ]

    # The assembler pairs the trailing call with a synthetic "no result"
    # (engine.wellformed), so even the history as it is is accepted...
    interrupt = Message(role="user", content=build_interrupt(prompts))
    assembled = build_request(
        "anthropic",
        ContextParts(
            model="claude-haiku-4-5",
            max_output_tokens=1024,
            messages=[*history, interrupt],
            tools=tools,
        ),
    )
    client.messages.create(**assembled)
    assert fake_anthropic.messages_requests()[-1].status == 200
    # ...naive: the history as it is, without that result, is refused.
    naive = copy.deepcopy(assembled)
    for message in naive["messages"]:
        message["content"] = [b for b in message["content"] if b.get("content") != NO_RESULT_TEXT]
    with pytest.raises(anthropic.BadRequestError) as err:
        client.messages.create(**naive)
    assert "`tool_use` ids were found without `tool_result` blocks immediately after: t2" in str(
        err.value
    )
    # Naive without tools: the API refuses tool blocks in a request that defines none.
    naive.pop("tools")
    with pytest.raises(anthropic.BadRequestError, match="must define tools"):
        client.messages.create(**naive)

    # Ours: docs/concepts/compaction.md#strip-trailing-calls strips the trailing calls, tool blocks
    # are rendered as text, no tools.
    request = make_retain_summary_request(
        history, prompts, model="claude-haiku-4-5", max_tokens=1024
    )
    summarizer = summarizers.AnthropicSummarizer(
        api_key="test-key", base_url=fake_anthropic.base_url, max_retries=0
    )
    result = summarizer.complete(request)
    assert "<summary>" in result.text and result.model == "claude-haiku-4-5"
    sent = fake_anthropic.messages_requests()[-1]
    assert sent.status == 200
    body = sent.body
    assert "tools" not in body and "tool_choice" not in body
    assert body["model"] == "claude-haiku-4-5"
    kinds = {b["type"] for m in body["messages"] for b in m["content"]}
    assert kinds == {"text"}
    last = body["messages"][-1]["content"][-1]["text"]
    assert "- Keep every file path verbatim\n- List open TODOs" in last
    assert "- List output refs (ref=...)" in last and "<retain>" in last and "<summary>" in last
    flat = str(body["messages"])
    assert (
        "Let me look at the parser." in flat and "id=t2" not in flat
    )  # content kept, call dropped


def test_service_compaction_through_the_sdk_with_model_override(fake_anthropic, session_factory):
    session = session_factory(
        4,
        policy={
            "compaction": {
                "model": "claude-haiku-4-5",
                "summary_directives": DIRECTIVES,
                "retain_directives": RETAIN_DIRECTIVES,
                # The summariser's own request and retain
                # (docs/concepts/compaction.md#retain-summary).
                "summary_reuse_cache": False,
                "pin_task": False,
            }
        },
    )
    session_append_messages(
        session=session,
        messages=[
            {"role": "user", "content": "Check the config"},
            {
                "role": "assistant",
                "content": "Reading it.",
                "tool_calls": [{"id": "gone", "name": "read", "arguments": {"path": "a.toml"}}],
            },
            {"role": "user", "content": "Never mind, summarise what we did."},
            {"role": "assistant", "content": "Sure."},
        ],
    )
    run, _ = compaction_request(
        session=session,
        trigger="manual",
        reason={"kind": "manual"},
        strategy="summarize",
        enqueue=False,
    )
    run = compaction_run_sync(run=run)
    assert run.status == "succeeded", run.error
    assert (run.model, run.summarizer) == ("claude-haiku-4-5", "anthropic")
    (sent,) = fake_anthropic.messages_requests()
    body = sent.body
    assert (
        sent.headers.get("authorization") == "Bearer test-key"
        or sent.headers.get("x-api-key") == "test-key"
    )
    assert sent.headers.get("anthropic-version")
    # docs/concepts/compaction.md#summary-model: compaction.model wins
    assert body["model"] == "claude-haiku-4-5"
    assert "tools" not in body
    assert "- Keep every file path verbatim" in body["messages"][-1]["content"][-1]["text"]
    # The span ended with the abandoned call: content kept, call stripped
    # (docs/concepts/compaction.md#strip-trailing-calls).
    assert "Reading it." in str(body["messages"]) and "id=gone" not in str(body["messages"])
    session.refresh_from_db()
    assert session.summary.startswith("Fake summary of") and session.retain.startswith(
        "- First request:"
    )
    assert live_messages(session)[0].text == "Never mind, summarise what we did."


def test_session_model_is_used_without_override(fake_anthropic, session_factory, settings):
    # the session's own model, docs/concepts/compaction.md#summary-model
    settings.CONTEXTSVC_SUMMARIZER_ANTHROPIC_MODEL = "session"
    session = session_factory(4)
    run, _ = compaction_request(
        session=session,
        trigger="manual",
        reason={"kind": "manual"},
        strategy="summarize",
        enqueue=False,
    )
    compaction_run_sync(run=run)
    assert fake_anthropic.messages_requests()[0].body["model"] == "claude-sonnet-4-5"


def test_sandwich_compression_prompt_through_the_sdk_spec004(fake_anthropic, session_factory):
    session = session_factory(6, policy={"compaction": {"strategy": "sandwich"}})
    run, _ = compaction_request(
        session=session, trigger="manual", reason={"kind": "manual"}, enqueue=False
    )
    run = compaction_run_sync(run=run)
    assert run.status == "succeeded"
    body = fake_anthropic.messages_requests()[0].body
    assert len(body["messages"]) == 1
    prompt = body["messages"][0]["content"][0]["text"]
    assert (
        prompt.startswith("Summarize this conversation excerpt concisely.") and "\n---\n" in prompt
    )
    session.refresh_from_db()
    assert session.summary.startswith("Fake compressed summary")


def test_sdk_retries_overloaded_then_succeeds(fake_anthropic, session_factory):
    fake_anthropic.fail_next(529)
    session = session_factory(4)
    run, _ = compaction_request(
        session=session,
        trigger="manual",
        reason={"kind": "manual"},
        strategy="summarize",
        enqueue=False,
    )
    run = compaction_run_sync(run=run)
    assert run.status == "succeeded"
    assert [r.status for r in fake_anthropic.messages_requests()] == [529, 200]


@pytest.mark.parametrize("status", [429, 500, 529])
def test_transient_errors_requeue_the_run_for_a_task_retry(fake_anthropic, session_factory, status):
    fake_anthropic.fail_next(status, count=2)  # the SDK's own retry (max_retries=1) also fails
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
    # The task's retry then goes through.
    run = compaction_execute(run_id=run.pk, task_id="t", can_retry=True)
    assert run.status == "succeeded"


def test_permanent_error_fails_the_run_with_service_unavailable_cx_nt3(
    fake_anthropic, session_factory
):
    fake_anthropic.fail_next(400, message="invalid model")
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
    assert "400" in run.error and "invalid model" in run.error
    assert Session.objects.filter(pk=session.pk).values().get() == before


def test_bad_key_is_not_transient(fake_anthropic):
    summarizer = summarizers.AnthropicSummarizer(
        api_key="wrong", base_url=fake_anthropic.base_url, max_retries=0
    )
    request = make_retain_summary_request(
        trailing_call_history(), PromptConfig(), model="claude-x", max_tokens=100
    )
    with pytest.raises(SummarizerError) as err:
        summarizer.complete(request)
    assert err.value.status == 401 and not err.value.transient


def test_sdk_honours_anthropic_base_url_env(fake_anthropic, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_anthropic.base_url)
    summarizer = summarizers.AnthropicSummarizer(api_key="test-key", base_url=None, max_retries=0)
    request = make_retain_summary_request(
        trailing_call_history(), PromptConfig(), model="claude-x", max_tokens=100
    )
    assert "<summary>" in summarizer.complete(request).text


def test_unreachable_server_is_transient():
    summarizer = summarizers.AnthropicSummarizer(
        api_key="k", base_url="http://127.0.0.1:9", max_retries=0, timeout=2
    )
    request = make_retain_summary_request(
        trailing_call_history(), PromptConfig(), model="claude-x", max_tokens=100
    )
    with pytest.raises(SummarizerError) as err:
        summarizer.complete(request)
    assert err.value.transient


def test_selection_offline_without_key_or_for_other_providers(settings):
    settings.CONTEXTSVC_SUMMARIZER = "auto"
    settings.CONTEXTSVC_SUMMARIZER_ANTHROPIC_API_KEY = None
    assert isinstance(summarizers.for_session(model="claude-sonnet-4-5"), OfflineSummarizer)
    settings.CONTEXTSVC_SUMMARIZER_ANTHROPIC_API_KEY = "k"
    assert isinstance(
        summarizers.for_session(model="claude-sonnet-4-5"), summarizers.AnthropicSummarizer
    )
    assert isinstance(summarizers.for_session(model="gpt-4o", provider="openai"), OfflineSummarizer)
    settings.CONTEXTSVC_SUMMARIZER = "offline"
    assert isinstance(summarizers.for_session(model="claude-sonnet-4-5"), OfflineSummarizer)


def test_no_run_left_running_after_a_failure(fake_anthropic, session_factory):
    fake_anthropic.fail_next(400)
    session = session_factory(4)
    run, _ = compaction_request(
        session=session,
        trigger="manual",
        reason={"kind": "manual"},
        strategy="summarize",
        enqueue=False,
    )
    compaction_run_sync(run=run)
    assert not CompactionRun.objects.filter(status__in=CompactionRun.ACTIVE).exists()
    # A new request starts a new run (nothing is stuck).
    session_append_messages(session=session, messages=turn(9))
    run2, created = compaction_request(
        session=session, trigger="manual", reason={"kind": "manual"}, enqueue=False
    )
    assert created and run2.pk != run.pk
