"""Property: whatever an agent posts and however often the session is compacted,
every marker of every stored output is found by history_search, at its seq,
ref and line, and the ref reads it back (docs/tool-output-cache.md, "Reaching what left the context")."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import tool_turn

pytestmark = pytest.mark.django_db

_ids = itertools.count()

outputs = st.lists(
    st.tuples(st.integers(1, 3_000), st.floats(0, 1), st.sampled_from(["bash", "read", "grep"])),
    min_size=1,
    max_size=8,
)
# After which output a compaction runs, and with what.
compactions = st.lists(
    st.tuples(st.integers(0, 7), st.sampled_from(["summarize", "tool_clearing", "chain"])),
    max_size=3,
)


def body_of(step: int, lines: int, where: float) -> tuple[str, str, int]:
    marker = f"MRK{step:02d}x{(step * 7919) % 10_000:04d}"
    at = min(lines, 1 + int(where * lines))
    rows = [f"{step}:{i} filler words of an ordinary tool output" for i in range(1, lines + 1)]
    rows[at - 1] = f"value {marker} computed"
    return "\n".join(rows) + "\n", marker, at


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(specs=outputs, plan=compactions)
def test_every_marker_is_found_after_any_compactions(alice, make_session, specs, plan):
    sid = make_session(id=f"recall-prop-{next(_ids)}", context_window=64_000)["id"]
    when = {}
    for after, strategy in plan:
        when.setdefault(after, strategy)
    expected: dict[str, tuple[int, str, int]] = {}
    for step, (lines, where, tool) in enumerate(specs):
        text, marker, at = body_of(step, lines, where)
        turn = tool_turn(f"c{step}", text, name=tool)
        response = alice.post(f"sessions/{sid}/messages", {"messages": turn})
        assert response.status_code == 200, response.content
        posted = response.json()["messages"][-1]
        expected[marker] = (posted["seq"], posted["output_ref"], at)
        strategy = when.get(step)
        if strategy:
            compacted = alice.post(
                f"sessions/{sid}/compact",
                {"wait": True, "strategy": strategy, "retain_last_turns": 1},
            )
            assert compacted.status_code in (200, 409, 422), compacted.content
    for marker, (seq, ref, line) in expected.items():
        found = alice.post(f"sessions/{sid}/tools/history_search/call", {"query": marker})
        assert found.status_code == 200, found.content
        hits = [(h["seq"], h["ref"], h["line"]) for h in found.json()["hits"]]
        # An identical output is stored once: its hit is the first message that carried it.
        assert hits and hits[0][1] == ref and hits[0][2] == line, (marker, seq, hits)
        read = alice.post(
            f"sessions/{sid}/tools/tool_output_cache/call",
            {"ref_id": ref, "offset": line, "limit": 1},
        )
        assert marker in read.json()["text"]
