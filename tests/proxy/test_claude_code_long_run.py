"""An agent far past its window loses nothing: a long scripted task through the live proxy, then a recall question.

The fake upstream answers as a model (``fakes.long_run.LongRunModel``)
that sees only the request: many Bash steps whose outputs carry markers the
shell computes, then a question for six steps' markers. The session's window
is small enough that the proxy compacts at least twice, so by the question
the early steps' outputs, and their refs, have left the context: the model
can only answer from what the proxy still offers it (the session-wide
search, else the refs it can see).

Two clients: the Anthropic SDK (no CLI needed; this test runs everywhere on
PostgreSQL) and the pinned Claude Code CLI (skips without it locally, fails
without it in CI, like the other Claude Code tests).
"""

from __future__ import annotations

import json
import re
from collections import Counter

import anthropic
import pytest

from compaction.models import CompactionRun
from fakes.anthropic_server import FakeAnthropic
from fakes.claude_code import run_claude
from fakes.long_run import (
    TASK,
    LongRunModel,
    LongTask,
    label,
    parse_answer,
    tool_uses,
)
from fakes.long_run_client import run_sdk_agent
from sessions.models import Message, Session, ToolOutput
from sessions.outputs.read import output_read_all
from tests.proxy.claude_code_live import messages_requests, start_proxy
from tests.proxy.conftest import PROXY_DB

pytestmark = [pytest.mark.needs_postgres, *PROXY_DB]

KB = 1024
HEADER = re.compile(r"STEP-(s\d{3})-BEGIN")


def make_session(client, sid: str, window: int) -> Session:
    body = {"id": sid, "model": "claude-fake-large", "context_window": window}
    response = client.post("sessions", {**body, "max_output_tokens": 4000})
    assert response.status_code == 201, response.content
    return Session.objects.get(external_id=sid)


def full_text(session: Session, message: Message) -> str:
    """A tool message's output in full: its content, or its ref's stored output when cut."""
    if message.view is None or not message.output_ref:
        return message.content or ""
    return output_read_all(ToolOutput.objects.get(session=session, ref=message.output_ref)).decode()


def bash_outputs(session: Session) -> list[Message]:
    return list(Message.objects.filter(session=session, role="tool", name="Bash").order_by("seq"))


def steps_stored(session: Session) -> Counter[str]:
    """How many times each step's output is in the transcript."""
    counts: Counter[str] = Counter()
    for message in bash_outputs(session):
        counts.update(HEADER.findall(full_text(session, message)))
    return counts


def step_ref(session: Session, step: int) -> str | None:
    """The ref the proxy gave a step's output, if it gave one."""
    header = f"STEP-{label(step)}-BEGIN"
    return next(
        (m.output_ref for m in bash_outputs(session) if header in full_text(session, m)), None
    )


def recall_trace(requests: list, session: Session, task: LongTask, answer: str) -> str:
    """For a failure: per asked step, in which of the question's requests its ref, marker
    or header showed, and which tool calls named its ref or label."""
    start = next(i for i, r in enumerate(requests) if task.question() in json.dumps(r.body))
    asked = [r.body for r in requests[start:]]
    lines = [answer]
    for k in task.asked():
        ref = step_ref(session, k) or "(no ref)"
        shown = [
            "".join(
                flag
                for flag, text in (("R", ref), ("M", task.marker(k)), ("H", f"STEP-{label(k)}-"))
                if text in json.dumps(body)
            )
            or "-"
            for body in asked
        ]
        calls = [
            u["name"]
            for u in tool_uses(asked[-1])
            if ref in json.dumps(u["input"]) or f"MARK-{label(k)}" in json.dumps(u["input"])
        ]
        lines.append(f"{label(k)} {ref}: shown per request {shown}; calls naming it {calls}")
    return "\n".join(lines)


def assert_recalled(fake: FakeAnthropic, session: Session, task: LongTask, answer: str) -> None:
    """The issue's assertions on a long run."""
    requests = messages_requests(fake)
    # Upstream refused nothing: every request fitted its limit.
    assert [r.error for r in requests if r.status != 200] == []
    # The proxy compacted, more than once.
    assert CompactionRun.objects.filter(session=session).count() >= 2
    # By the question, asked steps had left the context: neither their output,
    # nor their marker, nor their ref was in the request the question came in.
    question = next(r.body for r in requests if task.question() in json.dumps(r.body))
    shown = json.dumps(question)
    gone = [
        k
        for k in task.asked()
        if f"STEP-{label(k)}-BEGIN" not in shown
        and task.marker(k) not in shown
        and (step_ref(session, k) or "-") not in shown
    ]
    assert gone, "every asked step was still in the context: the run is too short"
    # ... and still the answer holds their markers, and every other asked one.
    got = parse_answer(answer)
    why = recall_trace(requests, session, task, answer)
    assert {label(k): got.get(label(k)) for k in gone} == {
        label(k): task.marker(k) for k in gone
    }, why
    assert got == task.expected(), why
    # The transcript holds every step's output, once.
    assert steps_stored(session) == Counter(label(k) for k in range(task.steps))


def test_sdk_agent_recalls_an_early_marker_after_compactions(
    tmp_path, fake_anthropic, alice, alice_key
):
    task = LongTask(steps=60, nonce="sdk", max_size=12 * KB, big=60 * KB)
    fake_anthropic.agent = LongRunModel(task)
    fake_anthropic.window = 20_000  # the upstream's limit: the session's window less its output
    session = make_session(alice, "long-run-sdk", 24_000)
    with start_proxy(tmp_path, fake_anthropic, managed=True) as port:
        client = anthropic.Anthropic(
            base_url=f"http://127.0.0.1:{port}/proxy/anthropic",
            api_key=alice_key[1],
            default_headers={"X-Contextsvc-Session": session.external_id},
            max_retries=0,
        )
        run = run_sdk_agent(client, task, model="claude-fake-large", cwd=tmp_path)
    assert run.error is None
    assert run.empty == 0
    assert_recalled(fake_anthropic, session, task, run.answer)


@pytest.mark.needs_agents
def test_claude_code_recalls_an_early_marker_after_compactions(
    tmp_path, fake_anthropic, alice, alice_key
):
    # Markers in the middle of each output: of those over ~30 KB Claude Code sends a
    # 2 KB preview and keeps the rest in a file, so the model finds that file by
    # searching the history for the step's preview, then greps it with Bash.
    task = LongTask(steps=60, nonce="cc")
    model = fake_anthropic.agent = LongRunModel(task)
    fake_anthropic.window = 44_000
    session = make_session(alice, "long-run-cc", 48_000)
    headers = {"X-Contextsvc-Session": session.external_id}
    env = {"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "4000"}
    home = tmp_path / "home"
    with start_proxy(tmp_path, fake_anthropic, managed=True) as port:
        base = f"http://127.0.0.1:{port}/proxy/anthropic"
        answers = []
        for n, prompt in enumerate((TASK, task.question())):
            code, result, err = run_claude(
                base,
                alice_key[1],
                home,
                headers=headers,
                env=env,
                prompt=prompt,
                extra_args=["--continue"] if n else None,
                timeout=90,
            )
            assert code == 0, (err, result)
            assert str(result["result"]).strip(), result  # no empty assistant reply
            answers.append(str(result["result"]))
    assert_recalled(fake_anthropic, session, task, answers[-1])
    # Some markers were only in Claude Code's own files: the search led to them.
    assert model.file_greps >= 1
