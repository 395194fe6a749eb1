"""history_search: recall over everything a session ever held (docs/tool-output-cache.md, "Reaching what left the context")."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from sessions.models import RecallSegment, RecallState
from sessions.recall.index import recall_catch_up, recall_index_sweep
from tests.conftest import tool_turn

pytestmark = pytest.mark.django_db

SEARCH = "history_search"


def post(client, sid: str, messages: list[dict]) -> dict:
    response = client.post(f"sessions/{sid}/messages", {"messages": messages})
    assert response.status_code == 200, response.content
    return response.json()


def search(client, sid: str, **arguments) -> dict:
    response = client.post(f"sessions/{sid}/tools/{SEARCH}/call", arguments)
    assert response.status_code == 200, response.content
    return response.json()


def output(step: int, lines: int = 40, marker_at: int | None = None) -> str:
    rows = [f"step {step} line {i} some ordinary build log text" for i in range(1, lines + 1)]
    if marker_at is not None:
        rows[marker_at - 1] = f"MARKER-{step:03d}=abc{step * 7919:x}"
    return "\n".join(rows) + "\n"


def test_a_marker_deep_in_a_large_output_is_found_with_its_line_and_ref(alice, make_session):
    sid = make_session()["id"]
    big = output(
        1, lines=20_000, marker_at=14_321
    )  # ~900 KB: several chunks and hundreds of segments
    ref = post(alice, sid, tool_turn("c1", big))["messages"][-1]["output_ref"]
    body = search(alice, sid, query="MARKER-001")
    assert [(h["seq"], h["ref"], h["line"], h["source"]) for h in body["hits"]] == [
        (2, ref, 14_321, "output")
    ]
    assert body["hits"][0]["snippet"] == f"MARKER-001=abc{7919:x}"
    # The hit's line is where a read of the ref finds it.
    read = alice.post(
        f"sessions/{sid}/tools/tool_output_cache/call",
        {"ref_id": ref, "offset": 14_321, "limit": 1},
    ).json()
    assert "MARKER-001" in read["text"]


def test_what_left_the_window_is_found_after_compaction(alice, make_session):
    sid = make_session()["id"]
    for step in range(1, 9):
        post(alice, sid, tool_turn(f"c{step}", output(step, lines=200, marker_at=100)))
    post(alice, sid, [{"role": "user", "content": "remember the codeword zebra-quartz-77"}])
    compacted = alice.post(
        f"sessions/{sid}/compact",
        {"wait": True, "strategy": "summarize", "retain_last_turns": 1},
    )
    assert compacted.status_code == 200, compacted.content
    window_start = alice.get(f"sessions/{sid}").json()["window_start_seq"]
    assert window_start > 4
    body = search(alice, sid, query="MARKER-002")
    assert [(h["seq"], h["in_context"]) for h in body["hits"]] == [(4, False)]
    # The summary the compaction wrote is indexed too.
    summaries = search(alice, sid, query="Summary of", tool_name=None)
    assert any(h["source"] == "summary" for h in summaries["hits"])


def test_a_retracted_message_is_still_found(alice, make_session):
    sid = make_session()["id"]
    post(alice, sid, [{"role": "user", "content": "first try: use port 8123 for the service"}])
    post(alice, sid, [{"role": "assistant", "content": "ok"}])
    response = alice.post(f"sessions/{sid}/messages/retract", {"from_seq": 1})
    assert response.status_code == 200, response.content
    hits = search(alice, sid, query="port 8123")["hits"]
    assert [(h["seq"], h["role"], h["source"]) for h in hits] == [(1, "user", "message")]


def test_tool_calls_are_searchable_and_the_tool_filter_applies(alice, make_session):
    sid = make_session()["id"]
    post(alice, sid, tool_turn("c1", "needle-in-bash\n", name="bash", command="grep -r needle"))
    post(alice, sid, tool_turn("c2", "needle-in-read\n", name="read", command="cat x"))
    all_hits = search(alice, sid, query="needle")["hits"]
    assert [(h["seq"], h["tool_name"]) for h in all_hits] == [
        (4, "read"),
        (2, "bash"),
        (1, "bash"),  # the call's arguments: grep -r needle
    ]
    only_read = search(alice, sid, query="needle", tool_name="read")["hits"]
    assert [h["seq"] for h in only_read] == [4]
    in_range = search(alice, sid, query="needle", seq_from=1, seq_to=2)["hits"]
    assert [h["seq"] for h in in_range] == [2, 1]


def test_hits_are_paged_newest_first_without_gaps_or_repeats(alice, make_session):
    sid = make_session()["id"]
    for step in range(1, 6):
        text = "".join(f"row {step}.{i} token-xyz\n" for i in range(1, 8))
        post(alice, sid, tool_turn(f"c{step}", text))
    seen: list[tuple[int, int]] = []
    cursor = None
    pages = 0
    while True:
        args = {"query": "token-xyz", "limit": 4}
        if cursor:
            args["cursor"] = cursor
        body = search(alice, sid, **args)
        seen.extend((h["seq"], h["line"]) for h in body["hits"])
        pages += 1
        cursor = body["next_cursor"]
        if not cursor:
            break
    assert pages == 9
    expected = [(seq, line) for seq in (10, 8, 6, 4, 2) for line in range(1, 8)]
    assert seen == expected


def test_regex_queries_use_their_literals_and_bad_queries_are_422(alice, make_session):
    sid = make_session()["id"]
    post(alice, sid, tool_turn("c1", "id=MARK-1234 ok\nid=MARK-77x no\n"))
    hits = search(alice, sid, query=r"MARK-\d{4}\b", regex=True, ignore_case=False)["hits"]
    assert [h["line"] for h in hits] == [1]
    for arguments, field in (
        ({"query": "ab"}, "query"),
        ({"query": "(a|b)+", "regex": True}, "query"),
        ({"query": "MARK(", "regex": True}, "query"),
        ({"query": "MARK", "limit": 500}, "limit"),
        ({"query": "MARK", "cursor": "nope"}, "cursor"),
        ({"query": "MARK", "bogus": 1}, "bogus"),
    ):
        response = alice.post(f"sessions/{sid}/tools/{SEARCH}/call", arguments)
        assert response.status_code == 422, (arguments, response.content)
        assert field in response.content.decode(), (arguments, response.content)


def test_another_keys_session_is_404(alice, bob, make_session):
    sid = make_session()["id"]
    post(alice, sid, [{"role": "user", "content": "secret-value-42"}])
    response = bob.post(f"sessions/{sid}/tools/{SEARCH}/call", {"query": "secret-value"})
    assert response.status_code == 404


def test_the_index_is_written_once_whoever_catches_up(alice, make_session):
    sid = make_session()["id"]
    post(alice, sid, tool_turn("c1", output(1, lines=30)))
    post(alice, sid, tool_turn("c2", output(1, lines=30)))  # the same bytes: stored once
    state = RecallState.objects.filter(session__external_id=sid)
    assert not state.exists()  # appends write nothing here
    assert recall_index_sweep() > 0
    pk = state.get().session_id
    before = RecallSegment.objects.filter(session_id=pk).count()
    assert recall_catch_up(pk).segments == 0
    assert RecallSegment.objects.filter(session_id=pk).count() == before
    outputs = RecallSegment.objects.filter(session_id=pk, source="output")
    assert set(outputs.values_list("seq", flat=True)) == {2}


@pytest.mark.needs_postgres
def test_postgres_search_reads_the_trigram_index_not_the_sessions_rows(alice, make_session):
    sid = make_session()["id"]
    for step in range(1, 6):  # ~1,000 segments of ordinary lines, one marker
        marker = 3 if step == 2 else None
        post(alice, sid, tool_turn(f"c{step}", output(step, lines=16_000, marker_at=marker)))
    assert search(alice, sid, query="MARKER-002")["hits"][0]["line"] == 3
    pk = RecallState.objects.get(session__external_id=sid).session_id
    with connection.cursor() as c:
        c.execute("ANALYZE agent_sessions_recallsegment")
        # A table this small is read whole by choice; what matters is which
        # index serves the search once it is not: the trigram one, not the
        # session's rows one by one.
        c.execute("SET LOCAL enable_seqscan = off")
        c.execute(
            "EXPLAIN SELECT id FROM agent_sessions_recallsegment "
            "WHERE session_id = %s AND text ILIKE %s",
            [pk, "%MARKER-002%"],
        )
        plan = "\n".join(r[0] for r in c.fetchall())
    assert "recall_text_trgm_idx" in plan, plan


def test_every_output_is_found_across_the_index_slices(alice, make_session):
    """More segments than the first round reads: the later rounds walk the
    session's seqs in slices (7/8, 3/4, 1/2 of the last seq), none skipped."""
    sid = make_session(context_window=200_000)["id"]
    for step in range(1, 41):
        post(alice, sid, tool_turn(f"c{step}", output(step, lines=300, marker_at=150)))
    for step in range(1, 41):
        hits = search(alice, sid, query=f"MARKER-{step:03d}")["hits"]
        assert [(h["seq"], h["line"]) for h in hits] == [(2 * step, 150)], step


def test_the_services_own_tool_calls_and_answers_are_not_indexed(alice, make_session):
    sid = make_session()["id"]
    post(alice, sid, tool_turn("c1", "needle-42 in a real output\n"))
    first = search(alice, sid, query="needle-42")
    assert [h["seq"] for h in first["hits"]] == [2]
    # The agent posts the search's call and answer, as it would any tool's.
    call = {"id": "s1", "name": SEARCH, "arguments": {"query": "needle-42"}}
    post(
        alice,
        sid,
        [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "s1", "content": json.dumps(first)},
        ],
    )
    again = search(alice, sid, query="needle-42")
    assert [h["seq"] for h in again["hits"]] == [2]
