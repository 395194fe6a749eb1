"""GET /sessions/{sid}/messages and /export: the whole transcript out, nothing posted lost."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakes.anthropic_rules import validate
from fakes.openai_rules import validate_chat
from proxy.models import ClientCompaction
from sessions.models import Message, Session
from sessions.selectors_transcript import transcript_lines
from sessions.transcript_export import disposition, export_filename
from tests.conftest import tool_turn
from tests.fakes.transcripts import transcripts

pytestmark = pytest.mark.django_db

BIG = "".join(f"line {i}: " + "x" * 90 + "\n" for i in range(3_000))  # stored apart, cut


def _post(client, sid: str, messages: list[dict]) -> dict:
    response = client.post(f"sessions/{sid}/messages", {"messages": messages})
    assert response.status_code == 200, response.content
    return response.json()


def _turn(t: int) -> list[dict]:
    return [
        {"role": "user", "content": f"Step {t}: fix module {t}. " + "word " * 150},
        *tool_turn(f"c{t}", "ok\n" * 40),
        {"role": "assistant", "content": f"Module {t} fixed. " + "done " * 80},
    ]


def pages(client, sid: str, limit: int) -> list[dict]:
    """Every page from the first, following next_cursor."""
    items, cursor = [], None
    for _ in range(10_000):
        query = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        response = client.get(f"sessions/{sid}/messages", **query)
        assert response.status_code == 200, response.content
        body = response.json()
        assert len(body["items"]) <= limit
        items.extend(body["items"])
        cursor = body["next_cursor"]
        if cursor is None:
            return items
    raise AssertionError("paging never ended")


def export(client, sid: str, **query) -> tuple[object, list[dict]]:
    response = client.get(f"sessions/{sid}/export", **query)
    assert response.status_code == 200, response.content
    body = b"".join(response.streaming_content)
    assert body == b"" or body.endswith(b"\n")
    return response, [json.loads(line) for line in body.splitlines()]


@pytest.fixture
def worked(alice, make_session) -> str:
    """Eight turns, a sandwich compaction (a head and a compacted middle), a summarising
    one, the last turn retracted and retried."""
    sid = make_session(id="worked")["id"]
    for t in range(8):
        _post(alice, sid, _turn(t))
    for strategy in ("sandwich", "summarize"):
        response = alice.post(f"sessions/{sid}/compact", {"wait": True, "strategy": strategy})
        assert response.status_code == 200, response.content
    assert alice.post(f"sessions/{sid}/messages/retract", {"last": 4}).status_code == 200
    _post(alice, sid, [{"role": "user", "content": "Try module 7 again", "pinned": True}])
    return sid


@pytest.mark.parametrize("limit", [1, 3, 7, 100, 1000])
def test_pages_cover_every_seq_once_across_compaction_and_retract(alice, worked, limit):
    session = Session.objects.get(external_id=worked)
    items = pages(alice, worked, limit)
    assert [m["seq"] for m in items] == list(range(1, session.last_seq + 1))
    assert session.message_count == session.last_seq == 33


def test_each_message_carries_its_state(alice, worked):
    session = Session.objects.get(external_id=worked)
    head, start = session.head_end_seq, session.window_start_seq
    assert 0 < head < start - 1  # a head, a compacted middle, a live tail
    states = {m["seq"]: m["state"] for m in pages(alice, worked, 100)}
    retracted = set(
        Message.objects.filter(session=session, retracted_at__isnull=False).values_list(
            "seq", flat=True
        )
    )
    assert retracted == {29, 30, 31, 32}
    for seq, state in states.items():
        if seq in retracted:
            expected = "retracted"
        elif seq <= head:
            expected = "head"
        elif seq < start:
            expected = "compacted"
        else:
            expected = "live"
        assert state == expected, (seq, state)
    assert set(states.values()) == {"head", "compacted", "live", "retracted"}


def test_a_message_shows_what_was_posted_and_what_the_model_sees(alice, make_session):
    sid = make_session(id="fields")["id"]
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}}
    _post(
        alice,
        sid,
        [
            {"role": "user", "content": [{"type": "text", "text": "Look"}, image], "pinned": True},
            {
                "role": "assistant",
                "content": "Reading.",
                "reasoning": "The log first.",
                "tool_calls": [{"id": "t1", "name": "cat", "arguments": {"path": "a.log"}}],
            },
            {"role": "tool", "tool_call_id": "t1", "content": BIG},
            {"role": "system", "content": "Be brief."},
        ],
    )
    user, call, result, system = pages(alice, sid, 10)
    assert user["content"] == [{"type": "text", "text": "Look"}, image] and user["pinned"]
    assert call["tool_calls"] == [{"id": "t1", "name": "cat", "arguments": {"path": "a.log"}}]
    assert call["reasoning"] == "The log first." and call["content"] == "Reading."
    # The output is stored apart: the row holds the view the model is shown and the ref.
    assert (result["tool_call_id"], result["name"], result["view_state"]) == ("t1", "cat", "cut")
    assert result["content"] == "" and result["content_in_output"] is True
    assert result["view"].startswith("line 0: ") and len(result["view"]) < len(BIG)
    raw = alice.get(f"refs/{result['output_ref']}/raw")
    assert b"".join(raw.streaming_content).decode() == BIG
    assert system["role"] == "system" and system["content"] == "Be brief."
    for item in (user, call, result, system):
        assert item["state"] == "live" and item["client_compaction_marker"] is False
        assert item["token_count"] > 0 and item["created_at"] and item["retracted_at"] is None


def test_a_small_output_keeps_its_content_beside_its_ref(alice, make_session):
    sid = make_session(id="small")["id"]
    _post(alice, sid, [{"role": "user", "content": "ls"}, *tool_turn("c1", "a.py\n")])
    result = pages(alice, sid, 10)[-1]
    assert result["content"] == "a.py\n" and result["output_ref"]
    assert result["content_in_output"] is False and result["view"] is None


def test_the_proxys_client_compaction_marker_is_marked(alice, make_session):
    sid = make_session(id="marked")["id"]
    _post(alice, sid, [{"role": "user", "content": "one"}, {"role": "user", "content": "marker"}])
    session = Session.objects.get(external_id=sid)
    ClientCompaction.objects.create(session=session, marker_seq=2, at_message=1)
    assert [m["client_compaction_marker"] for m in pages(alice, sid, 10)] == [False, True]


def test_another_keys_session_is_a_404(alice, bob, worked):
    for path in (f"sessions/{worked}/messages", f"sessions/{worked}/export"):
        response = bob.get(path)
        assert response.status_code == 404, path
        assert response.json()["error"]["code"] == "NOT_FOUND"
        assert alice.get(path.replace(worked, "nope")).status_code == 404


@pytest.mark.parametrize(
    "query, field",
    [
        ({"cursor": "zzz"}, "cursor"),
        ({"cursor": "s"}, "cursor"),
        ({"cursor": "s-1"}, "cursor"),
        ({"cursor": "sZ"}, "cursor"),
        ({"cursor": "s1234567"}, "cursor"),
        ({"cursor": "szzzzzz"}, "cursor"),  # past the largest seq
        ({"cursor": "s1\x00"}, "cursor"),
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"limit": "ten"}, "limit"),
    ],
)
def test_a_bad_cursor_or_limit_is_a_422_naming_it(alice, worked, query, field):
    response = alice.get(f"sessions/{worked}/messages", **query)
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["code"] == "VALIDATION_ERROR" and error["message"].startswith(f"{field}:")


def test_a_cursor_past_the_end_is_an_empty_last_page(alice, worked):
    body = alice.get(f"sessions/{worked}/messages", limit=33).json()
    assert len(body["items"]) == 33 and body["next_cursor"] is None
    body = alice.get(f"sessions/{worked}/messages", limit=32).json()
    assert body["next_cursor"] == "sw"  # opaque to clients; seq 32 here
    last = alice.get(f"sessions/{worked}/messages", cursor=body["next_cursor"]).json()
    assert [m["seq"] for m in last["items"]] == [33] and last["next_cursor"] is None
    beyond = alice.get(f"sessions/{worked}/messages", cursor="szz").json()
    assert beyond == {"items": [], "next_cursor": None}
    assert alice.get(f"sessions/{worked}/messages", cursor="").json()["items"][0]["seq"] == 1


def test_an_unknown_export_format_is_a_422_naming_format(alice, worked):
    for fmt in ("responses", "raw", "xml"):
        response = alice.get(f"sessions/{worked}/export", format=fmt)
        assert response.status_code == 422
        assert response.json()["error"]["details"][0]["field"] == "format"


def test_export_jsonl_is_the_paged_listing(alice, worked):
    response, lines = export(alice, worked)
    assert response["Content-Type"] == "application/x-ndjson"
    assert response["Content-Disposition"] == 'attachment; filename="worked.jsonl"'
    assert response["X-Transcript-Last-Seq"] == "33"
    assert lines == pages(alice, worked, 5)


def test_export_reads_the_transcript_in_chunks(alice, worked, django_assert_max_num_queries):
    session = Session.objects.get(external_id=worked)
    with django_assert_max_num_queries(3 + 33 // 4 + 1):
        chunks = list(transcript_lines(session, chunk=4))
    assert len(chunks) == 9  # 33 messages, 4 at a time
    lines = [json.loads(line) for chunk in chunks for line in chunk.splitlines()]
    assert [m["seq"] for m in lines] == list(range(1, 34))


def test_an_empty_session_lists_and_exports_nothing(alice, make_session):
    sid = make_session(id="empty")["id"]
    assert alice.get(f"sessions/{sid}/messages").json() == {"items": [], "next_cursor": None}
    for fmt in ({}, {"format": "anthropic"}, {"format": "openai"}):
        assert export(alice, sid, **fmt)[1] == []


def test_an_unsafe_session_id_still_names_the_file(alice, make_session):
    sid = make_session(id="run:7")["id"]
    response = alice.get(f"sessions/{sid}/export", format="openai")
    assert response["Content-Disposition"] == (
        "attachment; filename=\"run_7.openai.jsonl\"; filename*=UTF-8''run%3A7.openai.jsonl"
    )
    # Ids from elsewhere (the proxy's) may hold anything: the header stays one header.
    header = disposition(export_filename('a "b"/ü\r\nX: y', None))
    assert header.startswith('attachment; filename="a__b_____X__y.jsonl"; filename*=UTF-8')
    assert '"b"' not in header and "\n" not in header


def test_native_exports_leave_retracted_messages_out(alice, worked):
    _, listing = export(alice, worked)
    retracted = [m for m in listing if m["state"] == "retracted"]
    _, openai = export(alice, worked, format="openai")
    texts = json.dumps(openai)
    assert "Module 7 fixed." not in texts and "Try module 7 again" in texts
    assert retracted and "Module 6 fixed." in texts and "Step 0: fix module 0." in texts


# --- properties: any session ------------------------------------------------------------

_ids = itertools.count()


def as_posted(msg) -> dict:
    out = {"role": msg.role, "content": msg.content}
    if msg.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in msg.tool_calls
        ]
    if msg.tool_call_id:
        out["tool_call_id"] = msg.tool_call_id
    if msg.name:
        out["name"] = msg.name
    return out


def build(client, make_session, messages, cuts, big, retract, window) -> str:
    """A session as an agent leaves it: batches, maybe a big output, a retract and a
    retry, the window moved as a compaction moves it."""
    sid = make_session(id=f"tx-{next(_ids)}")["id"]
    posted = [as_posted(m) for m in messages]
    results = [i for i, m in enumerate(posted) if m["role"] == "tool"]
    if big and results:
        posted[results[big % len(results)]]["content"] = BIG
    edges = sorted({0, len(posted), *(c for c in cuts if c < len(posted))})
    for a, b in itertools.pairwise(edges):
        _post(client, sid, posted[a:b])
    if retract:  # a cut inside a tool exchange is refused (422): then nothing to retry
        response = client.post(f"sessions/{sid}/messages/retract", {"last": retract})
        if response.status_code == 200:
            _post(client, sid, [{"role": "user", "content": "Once more."}])
    Session.objects.filter(external_id=sid).update(window_start_seq=window)
    return sid


def reimport(client, make_session, lines: list[dict]) -> str:
    """The exported messages posted to a new session, one by one, each retraction
    replayed where it happened (before the first message appended after it), a
    stored output's text read back from its ref."""
    sid = make_session(id=f"re-{next(_ids)}")["id"]
    groups = sorted({m["retracted_at"] for m in lines if m["retracted_at"]})

    def retract_due(before: str | None) -> None:
        while groups and (before is None or groups[0] < before):
            at = groups.pop(0)
            first = min(m["seq"] for m in lines if m["retracted_at"] == at)
            response = client.post(f"sessions/{sid}/messages/retract", {"from_seq": first})
            assert response.status_code == 200, response.content

    for line in lines:
        retract_due(line["created_at"])
        message = {"role": line["role"], "content": line["content"], "pinned": line["pinned"]}
        for key in ("tool_calls", "tool_call_id", "name", "reasoning"):
            if line[key]:
                message[key] = line[key]
        if line["content_in_output"]:
            # The output's text, posted as the agent first posted it: its view is made
            # the same way (an upload's view would keep the head only).
            raw = b"".join(client.get(f"refs/{line['output_ref']}/raw").streaming_content)
            message["content"] = raw.decode()
        _post(client, sid, [message])
    retract_due(None)
    return sid


SAME = ("seq", "role", "content", "tool_calls", "tool_call_id", "name", "reasoning", "pinned")
SAME += ("content_in_output", "view_state")


def same(line: dict) -> dict:
    """What a re-import keeps: all but the session's own ids (a view names its ref)."""
    out = {k: line[k] for k in SAME}
    ref = line["output_ref"]
    out["view"] = line["view"].replace(ref, "<ref>") if ref and line["view"] else line["view"]
    return out


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    messages=transcripts(max_messages=10),
    cuts=st.lists(st.integers(1, 10), max_size=3),
    big=st.integers(0, 3),
    retract=st.integers(0, 3),
    window=st.integers(1, 12),
    limit=st.integers(1, 4),
)
def test_export_reimported_gives_the_same_transcript(
    alice, make_session, messages, cuts, big, retract, window, limit
):
    sid = build(alice, make_session, messages, cuts, big, retract, window)
    _, lines = export(alice, sid)
    assert lines == pages(alice, sid, limit)
    copy = reimport(alice, make_session, lines)
    _, again = export(alice, copy)
    assert [same(m) for m in again] == [same(m) for m in lines]
    # Retracted where the original was; the rest live (the copy was never compacted).
    assert [m["state"] == "retracted" for m in again] == [m["state"] == "retracted" for m in lines]
    for old, new in zip(lines, again, strict=True):
        if old["content_in_output"]:
            a, b = (alice.get(f"refs/{m['output_ref']}/raw") for m in (old, new))
            assert b"".join(a.streaming_content) == b"".join(b.streaming_content)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    messages=transcripts(max_messages=10),
    cuts=st.lists(st.integers(1, 10), max_size=3),
    big=st.integers(0, 3),
    retract=st.integers(0, 3),
    window=st.integers(1, 12),
)
def test_native_exports_of_any_transcript_pass_both_providers_checks(
    alice, make_session, messages, cuts, big, retract, window
):
    sid = build(alice, make_session, messages, cuts, big, retract, window)
    session = Session.objects.get(external_id=sid)
    tools = sorted({c["name"] for m in export(alice, sid)[1] for c in m["tool_calls"]})
    _, anthropic = export(alice, sid, format="anthropic")
    _, openai = export(alice, sid, format="openai")
    if not anthropic:  # nothing with content: no message a provider would take
        assert openai == []
        return
    body = {"model": session.model, "max_tokens": 100}
    validate(
        {**body, "messages": anthropic, "tools": [{"name": n, "input_schema": {}} for n in tools]}
    )
    validate_chat(
        {
            **body,
            "messages": openai,
            "tools": [{"type": "function", "function": {"name": n}} for n in tools],
        }
    )
    roles = [m["role"] for m in anthropic]
    assert all(a != b for a, b in itertools.pairwise(roles)), roles
