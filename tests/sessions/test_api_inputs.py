"""No input gives a 5xx: NULs, numbers past their bounds, policies, path ids, size caps."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compaction.models import Snapshot
from contextsvc.http import dumps
from sessions.models import IdempotencyRecord, Message, Session, ToolOutput
from tests.conftest import tool_turn

pytestmark = pytest.mark.django_db

NUL = "\x00"


def assert_names(response, field: str) -> None:
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["code"] == "VALIDATION_ERROR"
    fields = error["details"]
    if isinstance(fields, dict):
        fields = [fields]
    assert field in [f["field"] for f in fields], error


def still_works(client, sid: str) -> None:
    """The session answers and takes an ordinary append after a refused request."""
    assert client.get(f"sessions/{sid}").status_code == 200
    assert client.get(f"sessions/{sid}/context").status_code == 200
    assert client.get(f"sessions/{sid}/budget").status_code == 200
    ok = client.post(f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "hi"}]})
    assert ok.status_code == 200, ok.content


# --- NUL characters ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ({"role": "user", "content": "a\x00b"}, "messages.0.content"),
        (
            {"role": "user", "content": [{"type": "text", "text": "a\x00"}]},
            "messages.0.content.0.text",
        ),
        ({"role": "assistant", "content": "x", "reasoning": "r\x00"}, "messages.0.reasoning"),
        ({"role": "user", "content": "x", "name": "n\x00"}, "messages.0.name"),
        (
            {"role": "assistant", "tool_calls": [{"id": "c\x00", "name": "bash"}]},
            "messages.0.tool_calls.0.id",
        ),
        (
            {"role": "assistant", "tool_calls": [{"id": "c1", "name": "b\x00"}]},
            "messages.0.tool_calls.0.name",
        ),
        (
            {
                "role": "assistant",
                "tool_calls": [{"id": "c1", "name": "bash", "arguments": {"cmd": "ls\x00"}}],
            },
            "messages.0.tool_calls.0.arguments.cmd",
        ),
        (
            {
                "role": "assistant",
                "tool_calls": [{"id": "c1", "name": "bash", "arguments": {"k\x00": 1}}],
            },
            "messages.0.tool_calls.0.arguments.k\x00",
        ),
        (
            # JSON-text arguments (as OpenAI sends them) holding a NUL.
            {"role": "assistant", "tool_calls": [{"id": "c1", "name": "b", "arguments": "x\x00"}]},
            "messages.0.tool_calls.0.arguments",
        ),
    ],
)
def test_nul_in_message_text_is_422_naming_the_field_and_stores_nothing(
    alice, make_session, message, field
):
    sid = make_session()["id"]
    response = alice.post(f"sessions/{sid}/messages", {"messages": [message]})
    assert_names(response, field)
    assert Message.objects.filter(session__external_id=sid).count() == 0
    still_works(alice, sid)


def test_nul_in_a_tool_message_name_is_refused_but_its_content_is_kept(alice, make_session):
    sid = make_session()["id"]
    turn = tool_turn("c1", "out")
    turn[1]["name"] = "ba\x00sh"
    assert_names(alice.post(f"sessions/{sid}/messages", {"messages": turn}), "messages.1.name")


@pytest.mark.parametrize("cache", [True, False])
def test_tool_output_with_nul_is_stored_losslessly_and_shown_escaped(alice, make_session, cache):
    sid = make_session(policy={"tool_output_cache": {"enabled": cache}})["id"]
    text = "bin\x00ary\x00\nline two\n"
    body = alice.post(f"sessions/{sid}/messages", {"messages": tool_turn("c1", text)})
    assert body.status_code == 200, body.content
    ref = body.json()["messages"][-1]["output_ref"]
    assert ref, "the bytes are kept in the output store"
    raw = alice.get(f"refs/{ref}/raw")
    assert b"".join(raw.streaming_content) == text.encode()
    shown = alice.get(f"sessions/{sid}/context", format="raw").json()["messages"][-1]
    assert shown["content"] == "bin␀ary␀\nline two\n"
    anthropic = alice.get(f"sessions/{sid}/context").content
    assert b"\\u0000" not in anthropic
    still_works(alice, sid)


def test_tool_output_cost_of_text_with_nul_is_answered(alice, make_session):
    sid = make_session()["id"]
    alice.post(f"sessions/{sid}/messages", {"messages": tool_turn("c0", "x")[:1]})
    preview = alice.post(f"sessions/{sid}/tools/preview", {"text": "a\x00b\n" * 10})
    assert preview.status_code == 200, preview.content
    reserve = alice.post(f"sessions/{sid}/tools/reserve", {"tool_call_id": "c0", "text": "\x00"})
    assert reserve.status_code == 200, reserve.content
    bad = alice.post(f"sessions/{sid}/tools/reserve", {"tool_call_id": "c\x00", "text": "x"})
    assert_names(bad, "tool_call_id")


def test_tool_output_parts_with_nul_are_kept(alice, make_session):
    sid = make_session()["id"]
    turn = tool_turn("c1", "")
    turn[1]["content"] = [{"type": "text", "text": "a\x00b"}]
    response = alice.post(f"sessions/{sid}/messages", {"messages": turn})
    assert response.status_code == 200, response.content
    ref = response.json()["messages"][-1]["output_ref"]
    assert b"".join(alice.get(f"refs/{ref}/raw").streaming_content) == b"a\x00b"


def test_uploaded_output_with_nul_is_shown_escaped(alice, make_session):
    sid = make_session()["id"]
    up = alice.request("PUT", f"sessions/{sid}/outputs", raw=b"x\x00y\n").json()
    turn = tool_turn("c1", "")
    del turn[1]["content"]
    turn[1]["output_ref"] = up["ref"]
    response = alice.post(f"sessions/{sid}/messages", {"messages": turn})
    assert response.status_code == 200, response.content
    shown = alice.get(f"sessions/{sid}/context", format="raw").json()["messages"][-1]
    assert shown["content"] == "x␀y\n"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model": "m\x00"}, "model"),
        ({"model": "gpt-4o", "agent": "a\x00"}, "agent"),
        ({"model": "gpt-4o", "provider": "p\x00"}, "provider"),
        ({"model": "gpt-4o", "tokenizer": "t\x00"}, "tokenizer"),
        ({"model": "gpt-4o", "id": "ses\x00"}, "id"),
        (
            {"model": "gpt-4o", "policy": {"compaction": {"summary_prompt": "s\x00"}}},
            "policy.compaction.summary_prompt",
        ),
    ],
)
def test_nul_in_session_fields_is_422_and_creates_nothing(alice, body, field):
    before = Session.objects.count()
    assert_names(alice.post("sessions", body), field)
    assert Session.objects.count() == before


def test_nul_in_system_sections_and_tools_is_422_and_changes_nothing(alice, make_session):
    sid = make_session()["id"]
    ok = [{"name": "base", "content": "You help."}]
    assert alice.put(f"sessions/{sid}/system", ok).status_code == 200
    bad = [{"name": "base", "content": "You\x00 help."}]
    assert_names(alice.put(f"sessions/{sid}/system", bad), "0.content")
    assert_names(alice.put(f"sessions/{sid}/system", [{"name": "b\x00", "content": "x"}]), "0.name")
    assert Session.objects.get(external_id=sid).sections == [
        {"name": "base", "content": "You help.", "cacheable": True, "kind": "base"}
    ]
    tool = {"name": "read", "description": "Reads\x00", "input_schema": {"type": "object"}}
    assert_names(alice.put(f"sessions/{sid}/tools", [tool]), "0.description")
    tool = {
        "name": "read",
        "input_schema": {"type": "object", "properties": {"p\x00": {"type": "string"}}},
    }
    assert_names(alice.put(f"sessions/{sid}/tools", [tool]), "0.input_schema.properties.p\x00")
    assert Session.objects.get(external_id=sid).tools == []
    patch = alice.patch(f"sessions/{sid}", {"agent": "x\x00"})
    assert_names(patch, "agent")
    still_works(alice, sid)


def test_nul_in_ids_headers_and_queries_is_never_a_500(alice, make_session):
    sid = make_session()["id"]
    assert alice.get("sessions/a%00b").status_code == 404
    assert alice.get("sessions/a%00b/context").status_code == 404
    assert alice.get("refs/out_%00").status_code == 404
    assert alice.get("sessions", agent="a\x00").status_code == 422
    response = alice.post(
        f"sessions/{sid}/messages",
        {"messages": [{"role": "user", "content": "x"}]},
        headers={"Idempotency-Key": "k\x00"},
    )
    assert_names(response, "Idempotency-Key")
    call = alice.post(f"sessions/{sid}/tools/tool_output_cache/call", {"ref_id": "out_\x00"})
    assert call.status_code == 422
    still_works(alice, sid)


# --- numbers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"context_window": 2**40}, "context_window"),
        ({"max_output_tokens": 2**40}, "max_output_tokens"),
        ({"buffer_tokens": 3_000_000_000}, "buffer_tokens"),
        (
            {"policy": {"estimate": {"tool_schema_scale": 1e300}}},
            "policy.estimate.tool_schema_scale",
        ),
        (
            {"policy": {"estimate": {"per_message_overhead": 3e9}}},
            "policy.estimate.per_message_overhead",
        ),
        (
            {"policy": {"estimate": {"media_item_tokens": 2**62}}},
            "policy.estimate.media_item_tokens",
        ),
        (
            {"policy": {"compaction": {"retain_last_turns": 2**40}}},
            "policy.compaction.retain_last_turns",
        ),
        (
            {"policy": {"tool_output_cache": {"context_budget_tokens": 2**40}}},
            "policy.tool_output_cache.context_budget_tokens",
        ),
        (
            {
                "policy": {
                    "targets": [{"provider": "openai", "model": "x", "context_window": 2**40}]
                }
            },
            "policy.targets.0.context_window",
        ),
        (
            {"policy": {"prompt_cache": {"min_cacheable_tokens": 2**40}}},
            "policy.prompt_cache.min_cacheable_tokens",
        ),
    ],
)
def test_numbers_past_their_bounds_are_422_at_create_and_patch(alice, make_session, body, field):
    before = Session.objects.count()
    assert_names(alice.post("sessions", {"model": "gpt-4o", **body}), field)
    assert Session.objects.count() == before
    session = make_session()
    sid = session["id"]
    assert_names(alice.patch(f"sessions/{sid}", body), field)
    after = alice.get(f"sessions/{sid}").json()
    assert after["policy"] == session["policy"]
    assert after["context_window"] == session["context_window"]
    still_works(alice, sid)


def test_integer_past_64_bits_is_malformed_json_not_500(alice):
    raw = '{"model": "gpt-4o", "context_window": 100000000000000000000000000000}'
    response = alice.post("sessions", raw=raw)
    assert response.status_code == 422, response.content


def test_usage_and_query_numbers_past_their_bounds(alice, make_session):
    sid = make_session()["id"]
    alice.post(f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "hi"}]})
    for name in ("input_tokens", "output_tokens", "cache_creation_tokens", "cache_read_tokens"):
        assert_names(alice.post(f"sessions/{sid}/usage", {name: 2**40}), name)
    assert_names(alice.post(f"sessions/{sid}/usage", {"through_seq": 2**40}), "through_seq")
    assert_names(alice.get(f"sessions/{sid}/budget", extra_tokens=2**70), "extra_tokens")
    assert_names(alice.get(f"sessions/{sid}/context", extra_tokens=2**40), "extra_tokens")
    assert_names(alice.get("sessions", cursor=2**70), "cursor")
    # Each at the bound: accepted, the total fits its column.
    top = 100_000_000
    ok = alice.post(
        f"sessions/{sid}/usage",
        {"input_tokens": top, "output_tokens": top, "cache_read_tokens": top},
    )
    assert ok.status_code == 200 and ok.json()["total_tokens"] == 3 * top
    still_works(alice, sid)


def test_ref_query_numbers_past_their_bounds(alice, make_session):
    sid = make_session()["id"]
    ref = alice.post(f"sessions/{sid}/messages", {"messages": tool_turn("c1", "a\nb\n")}).json()[
        "messages"
    ][-1]["output_ref"]
    assert_names(alice.get(f"refs/{ref}", offset=2**70), "offset")
    assert_names(alice.get(f"refs/{ref}", limit=2**40), "limit")
    assert_names(alice.get(f"refs/{ref}", max_line_length=2**40), "max_line_length")
    assert_names(alice.get(f"refs/{ref}/grep", pattern="a", max_matches=2**40), "max_matches")
    assert_names(alice.get(f"refs/{ref}/grep", pattern="a", context=2**40), "context")
    assert_names(alice.get(f"refs/{ref}/grep", pattern="a", start_line=2**40), "start_line")
    assert alice.get(f"refs/{ref}", offset=2**31 - 1).json()["lines"] == 0
    call = alice.post(
        f"sessions/{sid}/tools/tool_output_cache/call", {"ref_id": ref, "offset": 2**70}
    )
    assert call.status_code == 422
    assert_names(alice.post(f"sessions/{sid}/tools/preview", {"tokens": 2**70}), "tokens")


def test_unicode_digit_ids_are_not_found(alice, make_session):
    sid = make_session()["id"]
    for snapshot in ("³", "٣", "1" * 40):
        response = alice.post(f"sessions/{sid}/snapshots/{snapshot}/restore")
        assert response.status_code == 404
        assert response.json()["error"]["message"] == f"Snapshot {snapshot!r} not found"
    assert alice.get("compactions/³").status_code == 404
    assert alice.get("sessions/³").status_code == 404


# --- policy ------------------------------------------------------------------------------


def test_partial_thresholds_are_merged_with_the_defaults(alice, make_session):
    session = make_session(policy={"thresholds": {"compact_at": 0.5}})
    assert session["policy"]["thresholds"] == {"compact_at": 0.5, "block_at": 0.98}
    sid = session["id"]
    patched = alice.patch(f"sessions/{sid}", {"policy": {"thresholds": {"block_at": 0.99}}})
    assert patched.status_code == 200, patched.content
    assert patched.json()["policy"]["thresholds"] == {"compact_at": 0.95, "block_at": 0.99}
    still_works(alice, sid)


def test_thresholds_out_of_order_name_the_field(alice, make_session):
    response = alice.post(
        "sessions", {"model": "gpt-4o", "policy": {"thresholds": {"compact_at": 0.99}}}
    )
    assert_names(response, "policy.thresholds")


@pytest.mark.parametrize(
    ("compaction", "field"),
    [
        ({"strategy": "summarise"}, "policy.compaction.strategy"),
        ({"chain": ["tool_clearing", "nope"]}, "policy.compaction.chain"),
        ({"chain": []}, "policy.compaction.chain"),
    ],
)
def test_unknown_strategy_names_are_422_at_create_and_patch(alice, make_session, compaction, field):
    body = {"model": "gpt-4o", "policy": {"compaction": compaction}}
    assert_names(alice.post("sessions", body), field)
    sid = make_session()["id"]
    assert_names(alice.patch(f"sessions/{sid}", {"policy": {"compaction": compaction}}), field)
    assert alice.get(f"sessions/{sid}").json()["policy"] == {}
    ok = alice.patch(
        f"sessions/{sid}", {"policy": {"compaction": {"chain": ["drop_oldest_turns"]}}}
    )
    assert ok.status_code == 200


def test_a_failed_patch_changes_nothing(alice, make_session):
    session = make_session(agent="first")
    sid = session["id"]
    bad = {"agent": "second", "context_window": 1_000, "max_output_tokens": 5_000}
    response = alice.patch(f"sessions/{sid}", bad)
    assert response.status_code == 422
    after = alice.get(f"sessions/{sid}").json()
    assert (after["agent"], after["context_window"]) == ("first", session["context_window"])
    still_works(alice, sid)


# --- idempotency --------------------------------------------------------------------------


def test_idempotent_retry_reserialised_is_the_same_request(alice, make_session):
    sid = make_session()["id"]
    messages = [
        {"role": "user", "content": "run it"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "name": "bash", "arguments": {"a": 1, "b": [1, 2]}}],
        },
    ]
    first = alice.post(
        f"sessions/{sid}/messages", {"messages": messages}, headers={"Idempotency-Key": "k"}
    )
    assert first.status_code == 200
    # Same meaning: keys in another order, other whitespace, defaults spelled out,
    # arguments as JSON text (as OpenAI sends them).
    again = (
        '{ "messages" : [ {"content":"run it","role":"user", "tool_calls": []},\n'
        '{"tool_calls":[{"arguments":"{\\"b\\": [1,2], \\"a\\": 1}","name":"bash","id":"c1"}],'
        '"role":"assistant"} ] }'
    )
    second = alice.post(f"sessions/{sid}/messages", raw=again, headers={"Idempotency-Key": "k"})
    assert second.status_code == 200, second.content
    assert second.json() == first.json()
    assert Message.objects.filter(session__external_id=sid).count() == 2
    other = {"messages": [{"role": "user", "content": "run it!"}]}
    conflict = alice.post(f"sessions/{sid}/messages", other, headers={"Idempotency-Key": "k"})
    assert conflict.status_code == 409
    assert IdempotencyRecord.objects.filter(session__external_id=sid).count() == 1


# --- response size guards -------------------------------------------------------------------

CAP = 256 * 1024


@pytest.fixture
def big_ref(alice, make_session):
    sid = make_session(context_window=200_000, max_output_tokens=4_096)["id"]
    text = "".join(f"row {i:06d} " + "y" * 200 + "\n" for i in range(6000))  # ~1.3 MB
    body = alice.post(f"sessions/{sid}/messages", {"messages": tool_turn("c1", text)})
    assert body.status_code == 200, body.content
    return sid, body.json()["messages"][-1]["output_ref"]


def test_ref_read_is_capped_and_says_where_to_go_on(alice, big_ref):
    sid, ref = big_ref
    response = alice.get(f"refs/{ref}", limit=100_000)
    assert len(response.content) <= CAP
    page = response.json()
    assert page["truncated"] and page["has_more"]
    assert page["next_offset"] == page["lines"] + 1
    assert f"offset={page['next_offset']}" in page["message"]
    following = alice.get(f"refs/{ref}", offset=page["next_offset"], limit=1).json()
    assert following["text"].startswith(f"{page['next_offset']:>6}\trow {page['lines']:06d}")
    tool = alice.post(
        f"sessions/{sid}/tools/tool_output_cache/call", {"ref_id": ref, "limit": 100_000}
    )
    assert len(tool.content) <= CAP and tool.json()["has_more"]


def test_ref_read_of_escaped_characters_is_capped_too(alice, make_session):
    sid = make_session()["id"]
    text = ("\x01" * 150_000 + "\n") * 3
    ref = alice.post(f"sessions/{sid}/messages", {"messages": tool_turn("c1", text)}).json()[
        "messages"
    ][-1]["output_ref"]
    response = alice.get(f"refs/{ref}", limit=3)
    assert len(response.content) <= CAP, len(response.content)
    page = response.json()
    assert page["lines"] >= 1 and page["truncated"] and page["has_more"]


def test_wide_grep_is_capped_and_continues_from_next_offset(alice, big_ref):
    sid, ref = big_ref
    response = alice.get(f"refs/{ref}/grep", pattern="row", max_matches=1000, context=100)
    assert len(response.content) <= CAP
    page = response.json()
    assert page["truncated"] and page["has_more"]
    lines = [m["line"] for m in page["matches"]]
    assert lines == list(range(1, len(lines) + 1))
    assert page["next_offset"] == lines[-1] + 1
    assert f"start_line={page['next_offset']}" in page["message"]
    more = alice.get(f"refs/{ref}/grep", pattern="row", start_line=page["next_offset"]).json()
    assert more["matches"][0]["line"] == page["next_offset"]
    tool = alice.post(
        f"sessions/{sid}/tools/tool_output_cache_grep/call",
        {"ref_id": ref, "pattern": "y", "max_matches": 1000, "context": 100},
    )
    assert len(tool.content) <= CAP and tool.json()["has_more"]


def test_grep_under_the_cap_is_whole(alice, big_ref):
    _, ref = big_ref
    page = alice.get(f"refs/{ref}/grep", pattern="row 00000[1-3]").json()
    assert [m["line"] for m in page["matches"]] == [2, 3, 4]
    assert not page["truncated"] and not page["has_more"] and page["next_offset"] is None


# --- property: nothing answers 5xx ----------------------------------------------------------

EVIL_INTS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**31, 2**31 - 1, 2**63, 2**64, -1, 0, 10**30]),
    st.floats(allow_nan=False, allow_infinity=False),
)
EVIL_TEXT = st.one_of(
    st.text(alphabet=st.sampled_from('a\x00³٣\u2400\ud7ff{}"\\ é'), max_size=12),
    st.sampled_from(["³", "\x00", "0", "-1", "1e300", "٣٣"]),
)
SCALARS = st.one_of(EVIL_INTS, EVIL_TEXT, st.booleans(), st.none())


def _query(value) -> str:
    return "" if value is None else str(value)


def _jsonable(value):
    return json.dumps(value)  # floats past the int range become 1e+30 etc.


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    field=st.sampled_from(
        [
            "context_window",
            "max_output_tokens",
            "buffer_tokens",
            "agent",
            "tokenizer",
            "policy.estimate.tool_schema_scale",
            "policy.estimate.per_message_overhead",
            "policy.thresholds.compact_at",
            "policy.thresholds.block_at",
            "policy.compaction.retain_last_turns",
            "policy.compaction.strategy",
            "policy.tool_output_cache.max_line_length",
            "policy.prompt_cache.max_breakpoints",
        ]
    ),
    value=SCALARS,
    usage=st.dictionaries(
        st.sampled_from(["input_tokens", "output_tokens", "cache_read_tokens", "through_seq"]),
        SCALARS,
        max_size=3,
    ),
    text=EVIL_TEXT,
    number=SCALARS,
    path_id=EVIL_TEXT,
)
@pytest.mark.slow
def test_no_input_gives_a_5xx_and_the_session_keeps_working(
    alice, make_session, field, value, usage, text, number, path_id
):
    sid = make_session()["id"]
    path_id = quote(path_id, safe="")
    raw_number, number = number, _query(number)
    body: dict = {}
    node = body
    *parents, leaf = field.split(".")
    for name in parents:
        node = node.setdefault(name, {})
    node[leaf] = value
    payload = _jsonable(body)
    calls = [
        alice.post("sessions", raw=_jsonable({"model": "gpt-4o", **body})),
        alice.request("PATCH", f"sessions/{sid}", raw=payload),
        alice.post(
            f"sessions/{sid}/messages",
            {
                "messages": [
                    {"role": "user", "content": text},
                    {
                        "role": "assistant",
                        "content": text,
                        "reasoning": text,
                        "tool_calls": [{"id": f"c{text}", "name": text, "arguments": {text: text}}],
                    },
                    {"role": "tool", "tool_call_id": f"c{text}", "content": text},
                ]
            },
        ),
        alice.post(f"sessions/{sid}/usage", raw=_jsonable(usage)),
        alice.put(f"sessions/{sid}/system", [{"name": text or "s", "content": text}]),
        alice.put(f"sessions/{sid}/tools", [{"name": "t", "description": text}]),
        alice.request(
            "POST",
            f"sessions/{sid}/compact",
            raw=_jsonable({"wait": True, "instructions": text, "retain_last_turns": raw_number}),
        ),
        alice.get(f"sessions/{sid}/budget", extra_tokens=number),
        alice.get(f"sessions/{sid}/context", extra_tokens=number),
        alice.get(f"refs/{path_id}", offset=number),
        alice.get(f"refs/{path_id}/grep", pattern=text or "x", context=number),
        alice.post(f"sessions/{sid}/snapshots/{path_id or '0'}/restore"),
        alice.get(f"sessions/{path_id or 'x'}"),
    ]
    for response in calls:
        assert response.status_code < 500, (response.status_code, response.content[:500])
    ref = ToolOutput.objects.filter(session__external_id=sid).values_list("ref", flat=True).first()
    if ref:
        for query in ({"offset": number}, {"limit": number}, {"max_line_length": number}):
            assert alice.get(f"refs/{ref}", **query).status_code < 500
        assert alice.get(f"refs/{ref}/grep", pattern="a", max_matches=number).status_code < 500
    still_works(alice, sid)


def test_services_check_the_policy_whoever_calls_them(alice_key):
    from contextsvc.errors import ValidationFailed
    from sessions.services import sessions as services

    key = alice_key[0]
    bad = {"estimate": {"tool_schema_scale": 1e300}}
    with pytest.raises(ValidationFailed) as caught:
        services.session_create(owner=key, data={"model": "gpt-4o", "policy": bad})
    assert caught.value.details == {"field": "policy.estimate.tool_schema_scale"}
    session = services.session_create(owner=key, data={"model": "gpt-4o"})
    with pytest.raises(ValidationFailed):
        services.session_update(session=session, data={"policy": {"compaction": {"chain": ["x"]}}})
    session.refresh_from_db()
    assert session.policy == {}


def _deep(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def _with(template: str, depth: int) -> str:
    return template.replace("DEEP", _deep(depth))


@pytest.mark.parametrize("depth", [100, 300, 1100])
def test_deeply_nested_json_is_refused_not_a_500(alice, make_session, depth):
    sid = make_session()["id"]
    call = _with('{"id": "c1", "name": "b", "arguments": {"x": DEEP}}', depth)
    raw = '{"messages": [{"role": "assistant", "tool_calls": [CALL]}]}'.replace("CALL", call)
    response = alice.post(f"sessions/{sid}/messages", raw=raw)
    assert response.status_code == 422, response.content
    tools = _with('[{"name": "t", "input_schema": {"type": "object", "properties": DEEP}}]', depth)
    assert alice.request("PUT", f"sessions/{sid}/tools", raw=tools).status_code == 422
    parts = _with(
        '{"messages": [{"role": "user", "content": [{"type": "image", "s": DEEP}]}]}', depth
    )
    assert alice.post(f"sessions/{sid}/messages", raw=parts).status_code == 422
    assert Message.objects.filter(session__external_id=sid).count() == 0
    still_works(alice, sid)


def test_deep_json_text_arguments_are_kept_as_raw_text(alice, make_session):
    sid = make_session()["id"]
    text = "[" * 100_000
    message = {"role": "assistant", "tool_calls": [{"id": "c1", "name": "b", "arguments": text}]}
    response = alice.post(f"sessions/{sid}/messages", {"messages": [message]})
    assert response.status_code == 200, response.content
    row = Message.objects.get(session__external_id=sid)
    assert row.tool_calls[0]["arguments"] == {"_raw": text}
    assert alice.get(f"sessions/{sid}/context").status_code == 200


def test_moderately_nested_arguments_are_fine(alice, make_session):
    sid = make_session()["id"]
    raw = _with(
        '{"messages": [{"role": "assistant", "tool_calls": [{"id": "c1", "name": "b", '
        '"arguments": {"x": DEEP}}]}]}',
        60,
    )
    assert alice.post(f"sessions/{sid}/messages", raw=raw).status_code == 200
    for fmt in ("anthropic", "openai", "raw"):
        assert alice.get(f"sessions/{sid}/context", format=fmt).status_code == 200


def test_upload_ref_with_the_cache_off_keeps_its_usual_view(alice, make_session):
    sid = make_session(policy={"tool_output_cache": {"enabled": False}})["id"]
    up = alice.request("PUT", f"sessions/{sid}/outputs", raw=b"first line\nsecond\n").json()
    turn = tool_turn("c1", "")
    del turn[1]["content"]
    turn[1]["output_ref"] = up["ref"]
    response = alice.post(f"sessions/{sid}/messages", {"messages": turn})
    assert response.status_code == 200, response.content
    shown = alice.get(f"sessions/{sid}/context", format="raw").json()["messages"][-1]
    assert shown["content"] == "first line\nsecond\n"


def test_a_capped_read_of_many_escaped_lines_reads_the_output_once(
    alice, make_session, monkeypatch
):
    from sessions.outputs import pages, read

    sid = make_session()["id"]
    # ~4.8 MB escaped as JSON: far over the read cap, and over the API's JSON cap too,
    # so it is uploaded raw (as an agent would) and referenced.
    text = ("\x01" * 2_000 + "\n") * 400
    up = alice.request("PUT", f"sessions/{sid}/outputs", raw=text.encode())
    turn = tool_turn("c1", "")
    del turn[1]["content"]
    turn[1]["output_ref"] = up.json()["id"]
    ref = alice.post(f"sessions/{sid}/messages", {"messages": turn}).json()["messages"][-1][
        "output_ref"
    ]
    calls = []
    real = read.output_slice
    monkeypatch.setattr(
        pages.read, "output_slice", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    response = alice.get(f"refs/{ref}", limit=400)
    assert len(response.content) <= CAP, len(response.content)
    page = response.json()
    assert page["truncated"] and page["has_more"] and page["lines"] > 1
    assert page["next_offset"] == 1 + page["lines"]
    assert len(calls) == 1  # one read, not one per halving


def test_integers_past_64_bits_are_refused_not_a_500_on_later_reads(alice, make_session):
    """Arguments given as JSON text are parsed by Python's json, which keeps any
    integer; the renderer (orjson) writes 64-bit ones only, so a bigger one stored
    would make a 500 of GET /snapshot and the context for good."""
    sid = make_session()["id"]
    for big in (2**64, -(2**63) - 1):
        call = {"id": "c1", "name": "b", "arguments": json.dumps({"n": big})}
        message = {"role": "assistant", "tool_calls": [call]}
        response = alice.post(f"sessions/{sid}/messages", {"messages": [message]})
        assert response.status_code == 422, response.content
    assert Message.objects.filter(session__external_id=sid).count() == 0
    # The edges of the range are kept, and read back.
    call = {"id": "c1", "name": "b", "arguments": json.dumps({"n": 2**64 - 1, "m": -(2**63)})}
    message = {"role": "assistant", "tool_calls": [call]}
    assert alice.post(f"sessions/{sid}/messages", {"messages": [message]}).status_code == 200
    assert alice.get(f"sessions/{sid}/snapshot").status_code == 200
    assert alice.get(f"sessions/{sid}/context").status_code == 200
    still_works(alice, sid)


def test_a_big_float_in_a_snapshot_reads_back_not_a_500(alice, make_session):
    """PostgreSQL's jsonb writes 1e23 back as 100000000000000000000000, which
    Django reads as an int past 64 bits: GET /snapshot renders it as a float."""
    sid = make_session()["id"]
    session = Session.objects.get(external_id=sid)
    part = {"type": "data", "n": 1e23, "m": -1.5e30}
    Snapshot.objects.create(
        session=session,
        window_start_seq=1,
        through_seq=0,
        token_count=1,
        message_count=1,
        messages=[{"seq": 1, "role": "user", "content": [part]}],
    )
    response = alice.get(f"sessions/{sid}/snapshot")
    assert response.status_code == 200, response.content
    (stored,) = response.json()["snapshot"]["messages"][0]["content"]
    assert stored["n"] == 1e23 and stored["m"] == -1.5e30


def test_the_renderer_writes_ints_past_64_bits_as_floats():
    assert json.loads(dumps({"a": [10**23, -(10**30), 2**64 - 1, True]})) == {
        "a": [1e23, -1e30, 2**64 - 1, True]
    }
