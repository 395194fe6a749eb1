"""Tool-result clearing as docs/concepts/compaction.md#tool-clearing and Anthropic's
``clear_tool_uses`` define it.

The minimum size (``clear_min_bytes``), "clear the oldest half"
(``clear_mode``), the original size in the note, and the adaptive keep count
(``adaptive_keep``: error-heavy and tool-dense stretches, errors kept longer).
"""

from __future__ import annotations

import pytest

from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.messages import Message, ToolCall
from contextsvc.engine.providers.common import attach_meta
from contextsvc.engine.strategies.base import (
    CompactionConfig,
    StrategyContext,
    TokenCounter,
    Window,
)
from contextsvc.engine.strategies.clearing import is_error_result, kept_results, tool_clearing
from contextsvc.engine.tokens import get_tokenizer

COUNTER = TokenCounter(get_tokenizer())
BIG = "a line of tool output long enough to be worth clearing\n" * 40  # ~2.2 KB
SMALL = "ok: 3 files changed\n" * 20  # 400 bytes


def numbered(messages: list[Message]) -> list[Message]:
    for i, msg in enumerate(messages, start=1):
        msg.seq = i
        msg.token_count = COUNTER.message(msg)
    return messages


def tool_use(cid: str, text: str, *, error: bool = False, name: str = "bash") -> list[Message]:
    content = attach_meta(text, {"is_error": True}) if error else text
    return [
        Message(role="assistant", tool_calls=(ToolCall(id=cid, name=name, arguments={"c": cid}),)),
        Message(role="tool", content=content, tool_call_id=cid, name=name, output_ref=f"ref_{cid}"),
    ]


def session(outputs: list[str], *, errors: set[int] = frozenset(), turns: int = 1) -> list[Message]:
    """``turns`` user turns sharing the outputs evenly (the last takes the rest)."""
    msgs: list[Message] = []
    per = max(1, len(outputs) // turns)
    for k, text in enumerate(outputs):
        if k % per == 0 and k // per < turns:
            msgs.append(Message(role="user", content=f"task {k}"))
        msgs.extend(tool_use(f"c{k}", text, error=k in errors))
    return numbered(msgs)


def run(msgs: list[Message], **cfg) -> tuple[list[Message], dict]:
    config = CompactionConfig(**cfg)
    out = tool_clearing(Window(msgs), StrategyContext(counter=COUNTER, config=config, force=True))
    return out.window.messages, out.report.details


def states(msgs: list[Message]) -> list[str]:
    return [m.view_state for m in msgs if m.role == "tool"]


def test_spec002_6_clearing_min_size_default_1024_bytes_leaves_small_results():
    msgs = session([BIG, SMALL, BIG, SMALL, BIG, BIG, BIG])
    out, details = run(msgs, keep_tool_uses=3)
    # The 4 oldest are candidates; the two small ones stay (not worth a note).
    assert states(out) == ["cleared", "full", "cleared", "full", "full", "full", "full"]
    assert details["cleared"] == 2
    assert CompactionConfig().clear_min_bytes == 1024


def test_spec002_6_clearing_min_size_zero_clears_small_results_too():
    msgs = session([BIG, SMALL, BIG, SMALL, BIG, BIG, BIG])
    out, _ = run(msgs, keep_tool_uses=3, clear_min_bytes=0)
    assert states(out) == ["cleared"] * 4 + ["full"] * 3


def test_spec002_6_clearing_note_names_ref_and_original_size():
    msgs = session([BIG, BIG])
    out, _ = run(msgs, keep_tool_uses=1)
    cleared = [m for m in out if m.view_state == "cleared"]
    assert len(cleared) == 1
    size = len(BIG.encode())
    assert cleared[0].view == f"[tool output cleared; ref=ref_c0; was {size:,} bytes]"
    assert f"{size:,}" in cleared[0].view and "ref_c0" in cleared[0].view


def test_spec002_6_clear_tool_uses_keep_recent_is_the_default_mode():
    msgs = session([BIG] * 8)
    out, details = run(msgs)
    assert states(out) == ["cleared"] * 5 + ["full"] * 3
    assert details["mode"] == "keep_recent"


@pytest.mark.parametrize("count", [1, 2, 7, 8])
def test_spec002_6_clear_oldest_half_alternative(count):
    msgs = session([BIG] * count)
    out, details = run(msgs, clear_mode="oldest_half")
    assert states(out) == ["cleared"] * (count // 2) + ["full"] * (count - count // 2)
    assert details["mode"] == "oldest_half"


def test_spec002_6_adaptive_keep_off_by_default_errors_treated_as_any_result():
    msgs = session([BIG] * 8, errors={1})
    out, _ = run(msgs, keep_tool_uses=3)
    assert states(out)[1] == "cleared"


def test_spec002_6_adaptive_keep_errors_are_kept_longer():
    # keep 3; an error among the 6 newest (factor 2) stays, a plain result there goes.
    msgs = session([BIG] * 8, errors={3, 0}, turns=4)  # 2 per turn: not dense
    out, _ = run(msgs, keep_tool_uses=3, adaptive_keep=True, error_keep_factor=2)
    s = states(out)
    assert s[3] == "full"  # an error, 5th newest: kept longer
    assert s[0] == "cleared"  # an error, but older than 6: cleared too
    assert s[2] == "cleared" and s[4] == "cleared"
    assert s[5:] == ["full"] * 3


def test_spec002_6_adaptive_keep_grows_in_an_error_heavy_stretch():
    # 4 of the 6 newest results failed: the agent is debugging, keep 6 instead of 3.
    msgs = session([BIG] * 10, errors={4, 6, 8, 9}, turns=5)
    keep = kept_results(
        msgs,
        [i for i, m in enumerate(msgs) if m.role == "tool"],
        CompactionConfig(keep_tool_uses=3, adaptive_keep=True, error_keep_factor=1),
    )
    tool_at = [i for i, m in enumerate(msgs) if m.role == "tool"]
    assert keep == set(tool_at[-6:])
    out, _ = run(msgs, keep_tool_uses=3, adaptive_keep=True, error_keep_factor=1)
    assert states(out) == ["cleared"] * 4 + ["full"] * 6


def test_spec002_6_adaptive_keep_grows_in_a_tool_dense_stretch():
    # One user turn with 12 tool uses (>= dense_tool_uses 8): keep doubles to 6.
    dense = session([BIG] * 12)
    out, _ = run(dense, keep_tool_uses=3, adaptive_keep=True)
    assert states(out) == ["cleared"] * 6 + ["full"] * 6
    # The same results spread over 6 turns (2 per turn) are not dense: keep 3.
    sparse = session([BIG] * 12, turns=6)
    out, _ = run(sparse, keep_tool_uses=3, adaptive_keep=True)
    assert states(out) == ["cleared"] * 9 + ["full"] * 3


def test_spec002_6_error_results_detected_from_flag_and_text():
    flagged = tool_use("e", "it failed", error=True)[1]
    assert is_error_result(flagged)
    assert is_error_result(
        Message(role="tool", content="<tool_use_error>File not found</tool_use_error>")
    )
    assert is_error_result(Message(role="tool", content="Traceback (most recent call last):\n  x"))
    assert not is_error_result(Message(role="tool", content="all 12 tests passed"))


@pytest.mark.parametrize(
    "knob,value",
    [
        ("clear_min_bytes", -1),
        ("clear_mode", "newest_half"),
        ("error_keep_factor", 0),
        ("dense_tool_uses", 0),
    ],
)
def test_spec002_6_clearing_knobs_are_validated(knob, value):
    with pytest.raises(EngineValidationError) as exc:
        CompactionConfig(**{knob: value})
    assert exc.value.field == knob


def test_spec002_6_clearing_knobs_come_from_the_policy():
    cfg = CompactionConfig.from_policy(
        {
            "clear_min_bytes": 0,
            "clear_mode": "oldest_half",
            "adaptive_keep": True,
            "error_keep_factor": 3,
            "dense_tool_uses": 5,
        }
    )
    assert (cfg.clear_min_bytes, cfg.clear_mode, cfg.adaptive_keep) == (0, "oldest_half", True)
    assert (cfg.error_keep_factor, cfg.dense_tool_uses) == (3, 5)
    default = CompactionConfig.from_policy({})
    assert (default.clear_min_bytes, default.clear_mode, default.adaptive_keep) == (
        1024,
        "keep_recent",
        False,
    )
