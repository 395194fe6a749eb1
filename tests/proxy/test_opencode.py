"""opencode (pinned, headless, offline) through the live proxy's Chat Completions route.

Its provider is ``@ai-sdk/openai-compatible`` with ``baseURL`` at
``/proxy/openai/v1`` and ``X-Contextsvc-Key`` in ``options.headers``. Without
``X-Contextsvc-Session`` its own ``x-session-id`` names the session
(``oc_<id>``); its title request (no tools, a system prompt of its own) lands
in a side session linked to the main one, never in the main transcript. With a
small ``limit.context`` it compacts by itself (a summarise request, then the
conversation restarts from the summary): the proxy records a client
compaction, every step stays in the stored record, and the run finishes.
"""

from __future__ import annotations

from collections import Counter

import pytest

from fakes.openai_server import FakeOpenAI
from fakes.opencode import (
    CONTINUE_PROMPT,
    SUMMARISE_PROMPT,
    TITLE_PROMPT,
    ShellSteps,
    final_text,
    run_opencode,
)
from fakes.shell_steps import FINAL, STEP_DONE
from proxy.models import ClientCompaction
from sessions.models import ContextCall, Message, ModelProfile, Session
from sessions.services.sessions import session_create
from tests.proxy.conftest import PROXY_DB, UPSTREAM_KEY
from tests.proxy.server import live_proxy
from tests.proxy.test_claude_code import stored_outputs

pytestmark = [pytest.mark.needs_postgres, pytest.mark.needs_agents, *PROXY_DB]

MODEL = "gpt-fake-large"
TASK = "Run the shell steps you are given, then report."


@pytest.fixture
def upstream():
    with FakeOpenAI(api_key=UPSTREAM_KEY) as fake:
        yield fake


@pytest.fixture
def proxy(tmp_path, upstream):
    with live_proxy(
        tmp_path,
        CONTEXTSVC_UPSTREAM_OPENAI_URL=f"{upstream.base_url}/v1",
    ) as port:
        yield f"http://127.0.0.1:{port}/proxy/openai/v1"


def _commands(session: Session) -> list[str]:
    calls = Message.objects.filter(session=session, role="assistant").order_by("seq")
    return [c["arguments"]["command"] for m in calls for c in m.tool_calls or ()]


def _texts(session: Session) -> str:
    return " ".join(
        str(c) for c in Message.objects.filter(session=session).values_list("content", flat=True)
    )


def _failed_calls(session: Session) -> list[tuple]:
    records = ContextCall.objects.filter(session=session, source="proxy")
    return [(r.upstream_status, r.error_type, r.error_message[:80]) for r in records if r.failed]


def test_opencode_names_its_session_and_its_title_request_stays_aside(
    proxy, upstream, alice_key, tmp_path
):
    steps = 3
    agent = upstream.agent = ShellSteps(steps=steps, lines=20)
    ModelProfile.objects.create(
        provider="openai", model=MODEL, context_window=400_000, max_output_tokens=4_000
    )
    code, events, err = run_opencode(
        proxy, UPSTREAM_KEY, tmp_path / "home", TASK, headers={"X-Contextsvc-Key": alice_key[1]}
    )
    assert code == 0, err[-2000:]
    assert final_text(events) == FINAL
    requests = upstream.chat_requests()
    assert [r.status for r in requests] == [200] * (steps + 2)  # the steps, the answer, a title
    assert all(r.headers["authorization"] == f"Bearer {UPSTREAM_KEY}" for r in requests)
    assert not any("x-contextsvc-key" in r.headers for r in requests)  # ours stays here

    # (a) opencode's own session id names the session: one session for the whole run.
    client_id = events[0]["sessionID"]
    assert client_id.startswith("ses_")
    main = Session.objects.get(external_id=f"oc_{client_id}")
    assert main.parent_id is None and main.client.startswith("opencode 1.18.")
    assert main.context_window == 400_000
    # Every step once, in order, with its output.
    assert _commands(main) == [agent.command(k) for k in range(steps)]
    outputs = stored_outputs(main)
    assert [f"STEP-{k}-DONE" in o for k, o in enumerate(outputs)] == [True] * steps

    # (b) the title request (no tools, its own system prompt) is a side session of it.
    # Upstream it went as opencode sent it (its own system prompt), not as the main one.
    titles = [
        r.body for r in requests if str(r.body["messages"][0]["content"]).startswith(TITLE_PROMPT)
    ]
    assert len(titles) == 1 and "Generate a title" in str(titles[0]["messages"])
    assert "Generate a title" not in _texts(main)
    assert not any(TITLE_PROMPT in str(s.get("content")) for s in main.sections or ())
    sides = list(Session.objects.filter(parent=main))
    assert len(sides) == 1 and "Generate a title" in _texts(sides[0])
    assert Session.objects.filter(owner=main.owner).count() == 2
    assert not _failed_calls(main), _failed_calls(main)


def test_opencode_compacts_by_itself_and_the_proxy_keeps_every_step(
    proxy, upstream, alice_key, tmp_path
):
    steps = 8
    agent = upstream.agent = ShellSteps(steps=steps, lines=1_000)  # ~1,200 fake tokens a step
    sid = "opencode-compacts"
    session_create(
        owner=alice_key[0],
        data={"id": sid, "model": MODEL, "context_window": 400_000, "max_output_tokens": 4_000},
    )
    code, events, err = run_opencode(
        proxy,
        UPSTREAM_KEY,
        tmp_path / "home",
        TASK,
        context_limit=14_000,  # opencode's prompt and tools alone are ~7,500 fake tokens
        output_limit=2_000,
        headers={"X-Contextsvc-Key": alice_key[1], "X-Contextsvc-Session": sid},
    )
    assert code == 0, err[-2000:]
    assert final_text(events) == FINAL
    requests = upstream.chat_requests()
    assert all(r.status == 200 for r in requests), [r.error for r in requests if r.error]

    # opencode compacted itself, through the proxy: its summarise request, then the restart.
    assert agent.compactions >= 1
    assert any(str(r.body["messages"][0]["content"]).startswith(SUMMARISE_PROMPT) for r in requests)
    assert any(CONTINUE_PROMPT in str(r.body["messages"][-1]["content"]) for r in requests)
    assert agent.issued == list(range(steps))  # it carried on from the right step

    session = Session.objects.get(external_id=sid)
    # Each of its compactions is recorded as a client compaction (the dashboard's event) ...
    assert ClientCompaction.objects.filter(session=session).count() == agent.compactions
    # ... its summarise requests, like its title request, went to side sessions ...
    assert SUMMARISE_PROMPT not in _texts(session)
    assert Session.objects.filter(parent=session).count() == 1 + agent.compactions
    # ... and nothing was lost: every command and its whole output are in the stored
    # record, in order. The turns opencode keeps across a compaction come back in its
    # restarted view and are stored again after the marker (the divergence rule keeps
    # the client's new view whole), so a step appears once or twice, never zero times.
    commands = _commands(session)
    assert list(dict.fromkeys(commands)) == [agent.command(k) for k in range(steps)]
    outputs = [o for o in stored_outputs(session) if STEP_DONE.search(o)]
    marks = [int(m) for o in outputs for m in STEP_DONE.findall(o)]
    assert list(dict.fromkeys(marks)) == list(range(steps))
    assert set(Counter(marks).values()) <= {1, 2}
    assert all(o.count("\n") > agent.lines for o in outputs)  # whole outputs, not cut views
    assert not _failed_calls(session), _failed_calls(session)
