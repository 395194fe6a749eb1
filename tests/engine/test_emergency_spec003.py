"""docs/concepts/compaction.md#emergency (forceCompression) and docs/concepts/compaction.md#chain:
compaction that always makes progress after the provider reported an overflow."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextsvc.engine.messages import Message, ToolCall
from contextsvc.engine.strategies.base import StrategyContext, TokenCounter, Window
from contextsvc.engine.strategies.dropping import drop_oldest_turns
from contextsvc.engine.tokens import get_tokenizer

COUNTER = TokenCounter(get_tokenizer())
LOG = "2026-11-26 12:00:00 INFO build step finished for /srv/app/module.py ok\n"


def numbered(messages: list[Message]) -> list[Message]:
    for i, msg in enumerate(messages, start=1):
        msg.seq = i
        msg.token_count = COUNTER.message(msg)
    return messages


def iteration(cid: str, output: str) -> list[Message]:
    return [
        Message(
            role="assistant", tool_calls=(ToolCall(id=cid, name="Bash", arguments={"c": cid}),)
        ),
        Message(
            role="tool", content=output, tool_call_id=cid, name="Bash", output_ref=f"ref_{cid}"
        ),
    ]


def claude_code_turn(
    iterations: int, *, lines: int = 40, last_lines: int | None = None
) -> list[Message]:
    """One user message then a long tool loop (how Claude Code works a task)."""
    msgs = [Message(role="user", content="Fix the failing build in src/app; keep the API stable.")]
    for k in range(iterations):
        n = last_lines if (last_lines is not None and k == iterations - 1) else lines
        msgs.extend(iteration(f"c{k}", f"step {k}\n" + LOG * n))
    return numbered(msgs)


def pairs_ok(messages: list[Message]) -> bool:
    seen: set[str] = set()
    for msg in messages:
        if msg.role == "assistant":
            seen.update(c.id for c in msg.tool_calls)
        elif msg.role == "tool" and msg.tool_call_id not in seen:
            return False
    return True


def contiguous(messages: list[Message]) -> bool:
    """The live window is one run of seqs (what the store can make live)."""
    seqs = [m.seq for m in messages]
    return seqs == list(range(seqs[0], seqs[0] + len(seqs))) if seqs else True


def overflow(window: Window, **kw) -> tuple[Window, dict]:
    out = drop_oldest_turns(window, StrategyContext(counter=COUNTER, reason="overflow", **kw))
    assert out.report.applied, out.report.details
    assert contiguous(out.window.messages)
    return out.window, out.report.details


def test_spec003_emergency_path_tiny_history_still_drops_after_overflow():
    # Two short turns: the full note costs more than the turn it drops. Before,
    # nothing was dropped (the result was "not smaller"); now the window shrinks.
    msgs = numbered(
        [
            Message(role="user", content="hi"),
            Message(role="assistant", content="hello"),
            Message(role="user", content="go on"),
            Message(role="assistant", content="ok"),
        ]
    )
    window = Window(msgs)
    after, details = overflow(window)
    assert after.tokens(COUNTER) < window.tokens(COUNTER)
    assert after.messages == msgs[2:]
    assert details["note"] in ("short", "none")


def test_spec003_emergency_path_drops_turns_down_to_the_newest_user_message_until_under_the_limit():
    msgs: list[Message] = []
    for t in range(6):
        msgs.append(Message(role="user", content=f"task {t}"))
        msgs.extend(iteration(f"t{t}", LOG * 30))
        msgs.append(Message(role="assistant", content=f"task {t} done"))
    msgs = numbered(msgs)
    window = Window(msgs)
    last_turn = max(i for i, m in enumerate(msgs) if m.role == "user")
    limit = COUNTER.messages(msgs[last_turn:]) + 300  # only the newest turn (and the note) fits
    after, details = overflow(window, limit_tokens=limit, target_tokens=limit)
    assert after.tokens(COUNTER) <= limit
    assert after.messages == msgs[last_turn:]  # whole turns went, the newest is intact
    assert details["dropped_turns"] == 5 and not details["fallback"]


def test_spec003_emergency_path_first_drop_is_half_the_turns_when_that_fits():
    msgs: list[Message] = []
    for t in range(4):
        msgs.append(Message(role="user", content=f"task {t}"))
        msgs.append(Message(role="assistant", content="done " * 50))
    msgs = numbered(msgs)
    after, details = overflow(Window(msgs), limit_tokens=10_000, target_tokens=10_000)
    assert details["dropped_turns"] == 2 and after.messages == msgs[4:]


def test_spec003_emergency_path_one_oversized_turn_is_cut_at_an_iteration_boundary():
    msgs = claude_code_turn(30)
    window = Window(msgs)
    limit = window.tokens(COUNTER) // 4
    after, details = overflow(window, limit_tokens=limit, target_tokens=limit // 2)
    assert after.tokens(COUNTER) <= limit
    kept = after.messages
    # The task itself stays verbatim, in the retain (the live window is one run of seqs).
    assert msgs[0].text in after.retain and after.preamble()[0].role == "user"
    assert kept[0].role == "assistant" and kept[0].tool_calls  # an iteration starts the rest
    assert pairs_ok(kept)
    # The newest iterations are kept byte-identical: nothing inside them was cut.
    assert kept[-4:] == msgs[-4:]
    assert details["dropped_in_turn"] > 0 and details["fallback"]
    assert "of the current turn dropped" in after.summary


def test_spec003_emergency_path_never_splits_a_call_from_its_results():
    # Parallel calls: one assistant message, three results.
    msgs = [Message(role="user", content="check everything")]
    for k in range(10):
        ids = [f"p{k}_{j}" for j in range(3)]
        msgs.append(
            Message(role="assistant", tool_calls=tuple(ToolCall(id=i, name="Read") for i in ids))
        )
        msgs.extend(
            Message(role="tool", content=LOG * 20, tool_call_id=i, name="Read") for i in ids
        )
    msgs = numbered(msgs)
    window = Window(msgs)
    after, _ = overflow(window, limit_tokens=window.tokens(COUNTER) // 3)
    assert pairs_ok(after.messages)
    assert after.messages[0].role == "assistant" and "check everything" in after.retain


def test_spec003_emergency_path_cuts_the_largest_result_view_before_the_newest():
    # The newest iteration ran two calls in parallel: a huge log and a small
    # newest result. No iteration boundary helps; cutting the big one's view
    # (head + tail) makes room — the newest output stays whole.
    calls = (ToolCall(id="big", name="Bash"), ToolCall(id="new", name="Bash"))
    msgs = numbered(
        [
            Message(role="user", content="read the logs"),
            Message(role="assistant", tool_calls=calls),
            Message(
                role="tool",
                content="BEGIN\n" + LOG * 2000 + "END\n",
                tool_call_id="big",
                output_ref="ref_big",
            ),
            Message(role="tool", content=LOG * 40, tool_call_id="new", output_ref="ref_new"),
        ]
    )
    window = Window(msgs)
    limit = COUNTER.messages([msgs[0], msgs[1], msgs[3]]) + 3000
    after, details = overflow(window, limit_tokens=limit)
    assert after.tokens(COUNTER) <= limit
    big, new = after.messages[2], after.messages[3]
    assert big.view_state == "cut" and big.view.startswith("BEGIN") and big.view.endswith("END\n")
    assert "tool_output_cache ref=ref_big" in big.view
    assert new == msgs[3]  # the newest output: untouched
    assert details["cut_views"] == 1 and details["dropped_in_turn"] == 0


def test_spec003_emergency_path_newest_output_is_cut_not_cleared_when_it_alone_cannot_fit():
    msgs = claude_code_turn(1, last_lines=3000)
    window = Window(msgs)
    limit = 2_000
    after, _ = overflow(window, limit_tokens=limit)
    assert after.tokens(COUNTER) <= limit
    newest = after.messages[-1]
    assert newest.view_state == "cut"  # never "cleared": the agent would repeat the call
    assert newest.view.startswith("step 0") and "tool_output_cache ref=ref_c0" in newest.view
    assert newest.view.endswith(LOG)


def test_spec003_emergency_path_makes_progress_when_our_count_says_it_fits():
    # The provider said too long though our estimate is under the limit: the
    # estimate undershoots, so the path still halves what it can (no resend of
    # the same request, no overflow loop).
    msgs = claude_code_turn(12)
    window = Window(msgs)
    after, _ = overflow(window, limit_tokens=window.tokens(COUNTER) * 2)
    assert after.tokens(COUNTER) <= window.tokens(COUNTER) // 2 + 200
    assert pairs_ok(after.messages)
    assert msgs[0].text in after.retain or after.messages[0] == msgs[0]


def test_spec003_budget_drop_leaves_the_newest_turn_alone_while_it_fits_the_limit():
    # The chain's last link (not an overflow) with a tiny hysteresis target:
    # the single turn fits the hard limit, so nothing inside it is cut (an agent
    # whose newest results vanish loops).
    msgs = claude_code_turn(8)
    window = Window(msgs)
    out = drop_oldest_turns(
        window,
        StrategyContext(
            counter=COUNTER,
            reason="budget",
            target_tokens=0,
            limit_tokens=window.tokens(COUNTER) + 500,
        ),
    )
    assert not out.report.applied
    assert out.window.messages == msgs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    turns=st.integers(1, 5),
    iterations=st.integers(0, 8),
    lines=st.integers(1, 60),
    limit=st.integers(2_000, 20_000),
)
def test_spec003_emergency_path_property_under_the_limit_and_paired(
    turns, iterations, lines, limit
):
    msgs: list[Message] = []
    for t in range(turns):
        msgs.append(Message(role="user", content=f"task {t}"))
        for k in range(iterations):
            msgs.extend(iteration(f"t{t}c{k}", LOG * lines))
    msgs = numbered(msgs)
    window = Window(msgs)
    out = drop_oldest_turns(
        window, StrategyContext(counter=COUNTER, reason="overflow", limit_tokens=limit)
    )
    after = out.window
    assert pairs_ok(after.messages) and contiguous(after.messages)
    assert after.tokens(COUNTER) <= window.tokens(COUNTER)
    if window.tokens(COUNTER) > limit:
        assert after.tokens(COUNTER) <= limit
    if turns > 1 or iterations > 1:
        assert out.report.applied  # progress whenever a turn or an iteration can go


def _turns(sizes: list[int]) -> list[Message]:
    msgs: list[Message] = []
    for t, calls in enumerate(sizes):
        msgs.append(Message(role="user", content=f"task {t}"))
        for k in range(calls):
            msgs.extend(iteration(f"t{t}c{k}", LOG * 30))
        msgs.append(Message(role="assistant", content=f"task {t} done"))
    return numbered(msgs)


def test_spec003_emergency_path_stops_dropping_once_back_in_the_room_not_at_the_deep_target():
    # The deep target is the summariser's goal; dropped turns are lost, so an
    # overflow drops whole turns only until the window is back in the room.
    msgs = _turns([2] * 8)
    total = COUNTER.messages(msgs)
    after, details = overflow(
        Window(msgs), limit_tokens=total, room_tokens=total * 3 // 4, target_tokens=total // 8
    )
    # about half already fits the room (docs/concepts/compaction.md#emergency)
    assert details["dropped_turns"] == 4
    assert after.messages[0].role == "user" and after.tokens(COUNTER) <= total * 3 // 4


def test_spec003_turn_boundaries_drop_keeps_whole_turns_when_several_remain_over_the_target():
    # Uneven turns over a tiny target: the cut stays at a turn start (no
    # iteration cut across the kept turns, which could drop a user message).
    msgs = _turns([1, 4, 2, 3])
    out = drop_oldest_turns(
        Window(msgs), StrategyContext(counter=COUNTER, reason="budget", target_tokens=100)
    )
    kept = out.window.messages
    assert out.report.applied and kept == msgs[len(msgs) - len(kept) :]
    assert kept[0].role == "user" and not out.report.details["dropped_in_turn"]
    assert sum(1 for m in kept if m.role == "user") == 2
