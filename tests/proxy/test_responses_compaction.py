"""Our compaction answers the client's: Codex's checkpoint request, the compaction trigger, /responses/compact."""

from __future__ import annotations

from asgiref.sync import async_to_sync

from compaction.models import CompactionRun
from compaction.reason_text import reason_text
from fakes.streams import ScriptedReply, tool_call
from proxy.services.responses_compaction import CHECKPOINT
from sessions.models import Message, Session
from tests.proxy import responses_fixtures
from tests.proxy.conftest import PROXY_DB
from tests.proxy.responses_fixtures import asgi_responses

pytestmark = PROXY_DB
fake_responses = responses_fixtures.fake_responses

MODEL = "gpt-5.1-codex"
TOOLS = [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}]


async def _history(client, turns: int) -> list[dict]:
    """A tool loop of ``turns`` steps (the fake is scripted by the caller), as the client keeps it."""
    items: list[dict] = [
        {"role": "developer", "content": "You are a coding agent."},
        {"role": "user", "content": "count the lines of every file"},
    ]
    for step in range(turns):
        response = await client.responses.create(model=MODEL, input=items, tools=TOOLS, store=False)
        items += [item.model_dump(exclude_none=True) for item in response.output]
        call = response.output[-1]
        output = f"file_{step}.py: {100 + step} lines\n" + "x" * 2000
        items.append({"type": "function_call_output", "call_id": call.call_id, "output": output})
    return items


def _script_loop(fake, turns: int) -> None:
    fake.script(
        *(
            ScriptedReply(
                thinking=f"step {k}", tool_calls=[tool_call("exec_command", {"cmd": f"wc {k}"})]
            )
            for k in range(turns)
        )
    )


def test_codex_checkpoint_is_answered_with_our_summary(fake_responses, alice_key):
    fake = fake_responses
    _script_loop(fake, 4)
    fake.script(ScriptedReply(text="Continuing after the checkpoint."))

    async def run():
        client = asgi_responses(alice_key[1], session="ses_ckpt")
        items = await _history(client, 4)
        upstream_before = len(fake.responses_requests())
        checkpoint = {"role": "user", "content": f"{CHECKPOINT}. Write a handoff summary."}
        answer = await client.responses.create(
            model=MODEL, input=[*items, checkpoint], tools=TOOLS, store=False
        )
        upstream_after = len(fake.responses_requests())
        restart = [
            items[0],
            items[1],
            {"role": "user", "content": f"Another language model started...\n{answer.output_text}"},
        ]
        after = await client.responses.create(model=MODEL, input=restart, tools=TOOLS, store=False)
        return answer, upstream_before, upstream_after, after

    answer, before, after_count, after = async_to_sync(run)()
    session = Session.objects.get(external_id="ses_ckpt")
    assert answer.output_text and answer.output_text == session.summary
    assert after_count == before  # answered without an upstream call
    run = CompactionRun.objects.get(session=session, trigger=CompactionRun.Trigger.CLIENT)
    assert run.status == CompactionRun.Status.SUCCEEDED and run.retention is not None
    assert run.reason["kind"] == "client" and run.reason["form"] == "checkpoint"
    assert reason_text(run.reason) == (
        "the client compacted its own history, with Codex's checkpoint request"
        f" (at {run.reason['used']:,} used, compact-at {run.reason['compact_at']:,})"
    )
    assert after.output_text == "Continuing after the checkpoint."
    # the restart is a divergence: every tool output stays in the transcript
    tools = Message.objects.filter(session=session, role="tool").count()
    assert tools == 4
    assert Message.objects.filter(session=session, content__icontains="history changed").exists()


def test_compaction_trigger_gets_our_item_and_it_is_expanded_upstream(fake_responses, alice_key):
    fake = fake_responses
    _script_loop(fake, 3)
    fake.script(ScriptedReply(text="Done with the summary in mind."))

    async def run():
        client = asgi_responses(alice_key[1], session="ses_trig")
        items = await _history(client, 3)
        stream = await client.responses.create(
            model=MODEL, input=[*items, {"type": "compaction_trigger"}], stream=True, store=False
        )
        events = [event async for event in stream]
        compaction = next(
            e.item for e in events if e.type == "response.output_item.done"
        ).model_dump()
        users = [i for i in items if i.get("role") == "user"]
        new = [*users, compaction, {"role": "user", "content": "and now?"}]
        final = await client.responses.create(model=MODEL, input=new, tools=TOOLS, store=False)
        return events, compaction, final

    events, compaction, final = async_to_sync(run)()
    assert events[-1].type == "response.completed"
    assert compaction["type"] == "compaction" and compaction["encrypted_content"].startswith("cs1.")
    assert final.output_text == "Done with the summary in mind."
    sent = fake.responses_requests()[-1].body
    assert not any(i.get("type") == "compaction" for i in sent["input"])
    session = Session.objects.get(external_id="ses_trig")
    run = CompactionRun.objects.get(session=session, trigger=CompactionRun.Trigger.CLIENT)
    assert run.reason["kind"] == "client" and run.reason["form"] == "trigger"
    texts = "\n".join(str(i.get("content")) for i in sent["input"])
    assert session.summary and texts.count(session.summary) == 1  # expanded, never twice


def test_responses_compact_endpoint(fake_responses, alice_key):
    fake = fake_responses
    _script_loop(fake, 3)
    fake.script(ScriptedReply(text="Carrying on."))

    async def run():
        client = asgi_responses(alice_key[1], session="ses_cmp")
        items = await _history(client, 3)
        raw = await client.responses.with_raw_response.compact(model=MODEL, input=items)
        compacted = raw.parse()
        follow = list(raw.http_response.json()["output"])
        follow.append({"role": "user", "content": "next?"})
        final = await client.responses.create(model=MODEL, input=follow, store=False)
        return compacted, follow, final

    compacted, follow, final = async_to_sync(run)()
    assert compacted.object == "response.compaction"
    assert compacted.output[-1].type == "compaction"
    assert [(o["type"], o["role"]) for o in follow[:1]] == [("message", "user")]
    assert final.output_text == "Carrying on."
    run = CompactionRun.objects.get(
        session__external_id="ses_cmp", trigger=CompactionRun.Trigger.CLIENT
    )
    assert run.reason["kind"] == "client" and run.reason["form"] == "compact"
