"""The task stays when it is all that leaves the window.

A first user message too big for the history room (an agent's demonstration
plus the task) used to make ``summarize`` skip — nothing else left to
summarise — and the emergency drop then took the task with its turn. Now the
task moves to the retain slot (condensed against the history room, keeping
every path and name it gives), with no summary call.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contextsvc.engine.messages import Message, ToolCall
from contextsvc.engine.strategies.base import StrategyContext, TokenCounter, Window
from contextsvc.engine.strategies.pinning import CONDENSED_MARK, PIN_MAX_SHARE
from contextsvc.engine.strategies.summary import summarize
from contextsvc.engine.summarize import SummaryRequest, SummaryResult
from contextsvc.engine.tokens import get_tokenizer

COUNTER = TokenCounter(get_tokenizer())
BIG = "line of tool output that is long enough to matter\n" * 60

TASK_HEAD = "Fix the bug in portalocker/utils.py where LOCK_EX times out."
TASK_TAIL = "Run tests/test_lock.py when you are done."


@dataclass
class RecordingSummarizer:
    name: str = "recording"
    requests: list[SummaryRequest] = field(default_factory=list)

    def complete(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        return SummaryResult(text="<summary>\nshort\n</summary>", model="m", summarizer=self.name)


def ctx(**kw) -> StrategyContext:
    kw.setdefault("summarizer", RecordingSummarizer())
    return StrategyContext(counter=COUNTER, **kw)


def _session(demo: str | None = None) -> list[Message]:
    if demo is None:
        demo = "\n".join(f"demo{i} step{i} of the worked example" for i in range(3000))
    msgs = [Message(role="user", content=f"{TASK_HEAD}\n{demo}\n{TASK_TAIL}")]
    for i in range(3):
        call = ToolCall(id=f"c{i}", name="bash", arguments={"command": f"run {i}"})
        msgs.append(Message(role="assistant", content="", tool_calls=(call,)))
        msgs.append(Message(role="tool", content=BIG, tool_call_id=f"c{i}", name="bash"))
    msgs.append(Message(role="assistant", content="working on it"))
    for seq, msg in enumerate(msgs, start=1):
        msg.seq = seq
        msg.token_count = COUNTER.message(msg)
    return msgs


def test_a_task_over_the_history_room_moves_to_the_retain_slot_without_a_summary_call():
    msgs = _session()
    before = sum(m.token_count for m in msgs)
    room = 16_000
    assert msgs[0].token_count > room  # the task alone cannot stay as a message
    summarizer = RecordingSummarizer()
    out = summarize(
        Window(msgs, "", ""),
        ctx(
            target_tokens=before // 3,
            room_tokens=room,
            max_context_tokens=room,
            summarizer=summarizer,
        ),
    )

    assert out.report.applied
    assert out.report.details.get("no_summary_call") and out.report.details.get("pinned_task")
    assert summarizer.requests == []
    retain = out.window.retain
    assert retain.startswith(CONDENSED_MARK)  # never labelled verbatim once condensed
    assert TASK_HEAD in retain and TASK_TAIL in retain  # head and tail of the task survive
    assert COUNTER.text(retain) <= PIN_MAX_SHARE * room + 64
    assert out.window.messages == msgs[1:]  # only the task left the messages
    assert out.window.messages[0].role == "assistant" and out.window.messages[1].role == "tool"
    assert out.report.after_tokens < before


def test_the_task_is_cut_against_the_history_room_not_the_whole_window():
    msgs = _session()
    before = sum(m.token_count for m in msgs)
    narrow = summarize(
        Window(msgs, "", ""),
        ctx(target_tokens=before // 3, room_tokens=4_000, max_context_tokens=16_000),
    )
    wide = summarize(
        Window(msgs, "", ""),
        ctx(target_tokens=before // 3, room_tokens=16_000, max_context_tokens=16_000),
    )
    assert COUNTER.text(narrow.window.retain) < COUNTER.text(wide.window.retain)
    assert COUNTER.text(narrow.window.retain) <= PIN_MAX_SHARE * 4_000 + 64


def test_a_condensed_task_keeps_the_names_only_its_middle_gives():
    # A worked demonstration: prose, with the one path the agent will need in the middle.
    prose = ["the agent read the output and chose its next step with care"] * 1500
    middle = "[File: /srv/demo/src/locking/backend_fcntl.py (212 lines total)]"
    msgs = _session("\n".join([*prose[:750], middle, *prose[750:]]))
    before = sum(m.token_count for m in msgs)
    room = 8_000
    assert msgs[0].token_count > PIN_MAX_SHARE * room
    out = summarize(
        Window(msgs, "", ""),
        ctx(target_tokens=before // 3, room_tokens=room, max_context_tokens=room),
    )
    retain = out.window.retain
    assert out.report.details.get("pinned_task")
    assert middle in retain and TASK_HEAD in retain and TASK_TAIL in retain
    assert COUNTER.text(retain) <= PIN_MAX_SHARE * room + 64
