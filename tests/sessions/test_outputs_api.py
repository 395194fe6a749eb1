"""Tool output cache through the API: views, trim, refs, grep, upload, tool budget."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sessions.models import Message, Session, ToolOutput
from tests.conftest import tool_turn

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_insertion_cap(monkeypatch):
    """These tests exercise the views and trims of docs/concepts/trimming.md#views and the refusals
    of docs/concepts/guard.md#tool-preflight on outputs far over the insertion cap
    (``tool_output_cache.view_share``, 0.02 of the window by default), which would cut them small
    first: the cap is off here (the whole window), as with ``view_share: 1``; it is tested in
    test_output_view_cap.py."""
    monkeypatch.setattr("contextsvc.engine.output_views.DEFAULT_VIEW_SHARE", 1.0)


def post(client, sid: str, messages: list[dict], status: int = 200) -> dict:
    response = client.post(f"sessions/{sid}/messages", {"messages": messages})
    assert response.status_code == status, response.content
    return response.json()


def big_text(lines: int, width: int = 100, tag: str = "row") -> str:
    return "".join(f"{tag} {i:06d} " + "x" * width + "\n" for i in range(lines))


def context(client, sid: str, fmt: str = "raw") -> dict:
    response = client.get(f"sessions/{sid}/context", format=fmt)
    assert response.status_code == 200, response.content
    return response.json()


# --- storing and views --------------------------------------------------------------------


def test_tool_result_is_stored_in_full_with_a_ref_and_a_view_spec000(alice, make_session):
    sid = make_session()["id"]
    text = big_text(5000)
    body = post(alice, sid, [{"role": "user", "content": "list"}, *tool_turn("c1", text)])
    result = body["messages"][-1]
    output = ToolOutput.objects.get(ref=result["output_ref"])
    # docs/concepts/trimming.md#output-ref
    assert result["ref"] == {"id": output.ref, "byte_size": len(text.encode()), "line_count": 5000}
    assert result["view"] == "cut"
    assert output.tool_name == "bash"  # from the assistant's call
    # The full output is expandable; the row holds only the view.
    last = alice.get(f"refs/{output.ref}", offset=5000, limit=1).json()
    assert last["text"] == "  5000\trow 004999 " + "x" * 100
    row = Message.objects.get(session__external_id=sid, seq=result["seq"])
    assert row.content == "" and len(row.view.encode()) <= 50 * 1024


def test_small_result_stays_whole_in_context_but_is_stored_too(alice, make_session):
    sid = make_session()["id"]
    body = post(alice, sid, tool_turn("c1", "a.txt\nb.txt\n"))
    result = body["messages"][-1]
    assert result["view"] == "full" and result["ref"]["line_count"] == 2
    assert context(alice, sid)["messages"][-1]["content"] == "a.txt\nb.txt\n"


def test_token_count_is_of_the_view_not_the_blob(alice, make_session):
    sid = make_session()["id"]
    body = post(alice, sid, tool_turn("c1", big_text(35_000)))  # ~3.9 MB, under the JSON cap
    tokens = body["messages"][-1]["token_count"]
    assert tokens < 50 * 1024 // 3  # the 50 KiB view, not 1.1 M tokens of blob
    assert body["budget"]["components"]["conversation"] < 20_000


def test_a_5mb_file_read_goes_through_the_streamed_upload(alice, make_session, settings):
    """Over the API's JSON cap (4 MiB) a tool result is refused unread, naming the
    upload; the same bytes uploaded raw and referenced are an ordinary result."""
    sid = make_session()["id"]
    text = big_text(48_000)  # 5.3 MB
    assert len(text) > settings.CONTEXTSVC_MAX_API_JSON_BYTES
    error = post(alice, sid, tool_turn("c1", text), status=413)["error"]
    assert error["details"]["upload"] == f"PUT /api/v1/sessions/{sid}/outputs"
    up = alice.request("PUT", f"sessions/{sid}/outputs", raw=text.encode())
    assert up.status_code == 201, up.content
    turn = tool_turn("c1", "")
    del turn[1]["content"]
    turn[1]["output_ref"] = up.json()["id"]
    result = post(alice, sid, turn)["messages"][-1]
    assert result["ref"]["byte_size"] == len(text)


def test_context_never_contains_more_than_the_view(alice, make_session):
    sid = make_session()["id"]
    post(alice, sid, tool_turn("c1", big_text(30_000, tag="needle")))
    for fmt in ("anthropic", "openai", "raw"):
        response = alice.get(f"sessions/{sid}/context", format=fmt)
        assert len(response.content) < 60 * 1024
        assert b"needle 029999" not in response.content


def test_identical_results_in_a_session_share_one_output(alice, make_session):
    sid = make_session()["id"]
    first = post(alice, sid, tool_turn("c1", "same output\n"))["messages"][-1]["output_ref"]
    second = post(alice, sid, tool_turn("c2", "same output\n"))["messages"][-1]["output_ref"]
    assert first == second
    assert ToolOutput.objects.filter(session__external_id=sid).count() == 1


def test_a_repeated_cut_output_reuses_the_ref_named_in_its_view(alice, make_session):
    sid = make_session()["id"]
    text = big_text(1000)  # 110 KB: cut, and small enough to be written under the lock
    first = post(alice, sid, tool_turn("c1", text))["messages"][-1]
    again = post(alice, sid, tool_turn("c2", text))["messages"][-1]
    assert again["output_ref"] == first["output_ref"] and again["view"] == "cut"
    calls = [{"id": f"d{i}", "name": "bash", "arguments": {}} for i in range(2)]
    batch = post(
        alice,
        sid,
        [
            {"role": "assistant", "content": "", "tool_calls": calls},
            {"role": "tool", "tool_call_id": "d0", "content": text},
            {"role": "tool", "tool_call_id": "d1", "content": text},
        ],
    )
    assert {m["output_ref"] for m in batch["messages"][1:]} == {first["output_ref"]}
    assert ToolOutput.objects.filter(session__external_id=sid).count() == 1
    for message in context(alice, sid)["messages"]:
        if message["role"] == "tool":
            assert f"ref={first['output_ref']}" in message["content"]


def test_posting_the_bytes_of_an_upload_reuses_the_upload(alice, make_session):
    sid = make_session()["id"]
    up = alice.request("PUT", f"sessions/{sid}/outputs", raw=b"uploaded first\n").json()
    result = post(alice, sid, tool_turn("c1", "uploaded first\n"))["messages"][-1]
    assert result["output_ref"] == up["id"]


def test_offload_preset_follows_spec002(alice, make_session):
    sid = make_session(policy={"tool_output_cache": {"preset": "offload"}})["id"]
    text = "go: downloading github.com/stretchr/testify v1.9.0\n" * 200
    result = post(alice, sid, tool_turn("c1", text, name="shell_exec"))["messages"][-1]
    assert result["view"] == "offloaded"
    shown = context(alice, sid)["messages"][-1]["content"]
    assert shown.startswith(
        f'[Tool result stored — {len(text):,} bytes, 200 lines from "shell_exec".'
    )
    assert f'ref_id="{result["output_ref"]}"' in shown


def test_tool_response_preset_cuts_at_12288_bytes_spec001(alice, make_session):
    sid = make_session(policy={"tool_output_cache": {"preset": "tool_response"}})["id"]
    post(alice, sid, tool_turn("c1", big_text(1000)))
    shown = context(alice, sid)["messages"][-1]["content"]
    assert len(shown.encode()) <= 12_288 and "Tool output cut" in shown


def test_disabled_cache_keeps_results_as_posted(alice, make_session):
    sid = make_session(
        policy={"tool_output_cache": {"enabled": False}, "compaction": {"auto": False}}
    )["id"]
    text = big_text(1000)
    result = post(alice, sid, tool_turn("c1", text))["messages"][-1]
    assert result["output_ref"] is None and result["view"] == "full"
    assert context(alice, sid)["messages"][-1]["content"] == text


# --- budget trim (docs/concepts/trimming.md#budget-trim) ------------------------------------------

BUDGET = 3_000  # tokens; each output below is ~1,000


def output_of(i: int) -> str:
    return f"output {i}\n" + ("x" * 79 + "\n") * 50


def tool_views(sid: str) -> list[tuple[int, str, int]]:
    return list(
        Message.objects.filter(session__external_id=sid, role="tool")
        .order_by("seq")
        .values_list("seq", "view_state", "token_count")
    )


def test_checkpoint1_trims_oldest_outputs_over_budget_spec000(alice, make_session):
    sid = make_session(policy={"tool_output_cache": {"context_budget_tokens": BUDGET}})["id"]
    for i in range(3):
        body = post(alice, sid, tool_turn(f"c{i}", output_of(i)))
    # 3 × ~1,010 tokens > 3,000: the oldest goes (down to 0.75 × budget), newest kept.
    states = [state for _, state, _ in tool_views(sid)]
    assert states == ["trimmed", "full", "full"]
    first_seq = tool_views(sid)[0][0]
    assert body["trimmed_seqs"] == [first_seq]
    tool_outputs = body["budget"]["tool_outputs"]
    assert tool_outputs["tokens"] <= tool_outputs["trim_to"] == 2_250
    row = Message.objects.get(session__external_id=sid, seq=first_seq)
    assert row.view == f"[tool output trimmed; ref={row.output_ref}]"
    assert row.output_ref and ToolOutput.objects.filter(ref=row.output_ref).exists()


def test_checkpoint2_trimmed_message_serializes_as_placeholder_spec000(alice, make_session):
    sid = make_session(policy={"tool_output_cache": {"context_budget_tokens": BUDGET}})["id"]
    refs = [
        post(alice, sid, tool_turn(f"c{i}", output_of(i)))["messages"][-1]["output_ref"]
        for i in range(3)
    ]
    placeholder = f"[tool output trimmed; ref={refs[0]}]"
    # bash is registered: a request without tools may not carry tool blocks,
    # so the assembler would send the calls and results as text.
    bash = {"name": "bash", "input_schema": {"type": "object"}}
    assert alice.put(f"sessions/{sid}/tools", [bash]).status_code == 200
    anthropic = context(alice, sid, "anthropic")
    results = [
        b for m in anthropic["messages"] for b in m["content"] if b.get("type") == "tool_result"
    ]
    assert results[0] == {"type": "tool_result", "tool_use_id": "c0", "content": placeholder}
    openai = context(alice, sid, "openai")
    tool_msgs = [m for m in openai["messages"] if m["role"] == "tool"]
    assert tool_msgs[0]["content"] == placeholder
    raw = context(alice, sid, "raw")
    first = next(m for m in raw["messages"] if m["role"] == "tool")
    assert (first["content"], first["view"], first["output_ref"]) == (
        placeholder,
        "trimmed",
        refs[0],
    )
    assert "output 0\n" not in str(anthropic) + str(openai)


def test_trim_lowers_the_conversation_tokens(alice, make_session):
    sid = make_session(policy={"tool_output_cache": {"context_budget_tokens": BUDGET}})["id"]
    before = None
    for i in range(3):
        body = post(alice, sid, tool_turn(f"c{i}", output_of(i)))
        if i == 1:
            before = body["budget"]["components"]["conversation"]
    after = body["budget"]["components"]["conversation"]
    session = Session.objects.get(external_id=sid)
    total = sum(t for _, _, t in tool_views(sid))
    assert session.conversation_tokens == after
    assert after < before + 1_000  # the third output came in, the first (~1,000) went
    assert total == sum(
        Message.objects.filter(session=session, role="tool").values_list("token_count", flat=True)
    )
    assert session.tool_output_tokens == sum(t for _, s, t in tool_views(sid) if s != "trimmed")


def test_hysteresis_frees_room_at_once_and_trimmed_outputs_stay_trimmed(alice, make_session):
    sid = make_session(
        policy={"tool_output_cache": {"context_budget_tokens": 10_000, "trim_hysteresis": 0.5}}
    )["id"]
    trims = 0
    seen_trimmed: set[int] = set()
    for i in range(30):
        body = post(alice, sid, tool_turn(f"c{i}", output_of(i)))
        trims += bool(body["trimmed_seqs"])
        now_trimmed = {seq for seq, state, _ in tool_views(sid) if state == "trimmed"}
        assert seen_trimmed <= now_trimmed  # once trimmed, stays trimmed
        seen_trimmed = now_trimmed
        assert body["budget"]["tool_outputs"]["tokens"] <= 10_000
    # ~1,000 tokens per turn; each trim goes down to 5,000: a trim every ~5 turns.
    assert 3 <= trims <= 6
    # Trimmed outputs are always the oldest.
    states = [state for _, state, _ in tool_views(sid)]
    assert states == sorted(states, key=lambda s: s != "trimmed")


def test_a_batch_over_budget_trims_its_own_older_outputs_but_never_the_newest(alice, make_session):
    sid = make_session(policy={"tool_output_cache": {"context_budget_tokens": 1_500}})["id"]
    calls = [{"id": f"c{i}", "name": "bash", "arguments": {}} for i in range(4)]
    body = post(
        alice,
        sid,
        [
            {"role": "assistant", "content": "", "tool_calls": calls},
            *[{"role": "tool", "tool_call_id": f"c{i}", "content": output_of(i)} for i in range(4)],
        ],
    )
    assert [m["view"] for m in body["messages"][1:]] == ["trimmed", "trimmed", "trimmed", "full"]


def test_trimmed_output_expands_through_the_builtin_tool(alice, make_session):
    """The README flow: an agent reads a trimmed output back by its ref."""
    sid = make_session(policy={"tool_output_cache": {"context_budget_tokens": BUDGET}})["id"]
    ref = post(alice, sid, tool_turn("c0", output_of(0)))["messages"][-1]["output_ref"]
    for i in range(1, 3):
        post(alice, sid, tool_turn(f"c{i}", output_of(i)))
    assert f"ref={ref}" in context(alice, sid)["messages"][1]["content"]
    response = alice.post(
        f"sessions/{sid}/tools/tool_output_cache/call", {"ref_id": ref, "offset": 1, "limit": 1}
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["text"] == "     1\toutput 0"
    assert (body["ref_id"], body["total_lines"], body["has_more"], body["next_offset"]) == (
        ref,
        51,
        True,
        2,
    )
    grep = alice.post(
        f"sessions/{sid}/tools/tool_output_cache_grep/call", {"ref_id": ref, "pattern": "^output"}
    ).json()
    assert grep["matches"] == [{"line": 1, "text": "output 0", "before": [], "after": []}]


def test_append_cost_does_not_grow_with_the_session(alice, make_session):
    sid = make_session(policy={"tool_output_cache": {"context_budget_tokens": 60_000}})["id"]

    def queries_for_one_turn(i: int) -> int:
        with CaptureQueriesContext(connection) as ctx:
            post(alice, sid, tool_turn(f"q{i}", f"result {i}\n"))
        return len(ctx.captured_queries)

    early = queries_for_one_turn(0)
    for i in range(1, 120):
        post(alice, sid, tool_turn(f"q{i}", f"result {i}\n"))
    assert queries_for_one_turn(999) == early


def test_counters_are_recounted_after_the_live_window_moves(alice, make_session):
    sid = make_session(policy={"tool_output_cache": {"context_budget_tokens": BUDGET}})["id"]
    for i in range(2):
        post(alice, sid, tool_turn(f"c{i}", output_of(i)))
    session = Session.objects.get(external_id=sid)
    # A compaction moved the window past both outputs.
    Session.objects.filter(pk=session.pk).update(window_start_seq=session.last_seq + 1)
    body = post(alice, sid, tool_turn("c9", output_of(9)))
    assert body["trimmed_seqs"] == []  # only the new output counts now
    assert body["budget"]["tool_outputs"]["tokens"] == body["messages"][-1]["token_count"]


# --- refs: slices and grep --------------------------------------------------------------------


@pytest.fixture
def ref(alice, make_session) -> str:
    sid = make_session()["id"]
    return post(alice, sid, tool_turn("c1", big_text(3000)))["messages"][-1]["output_ref"]


def test_slice_is_line_numbered_like_a_read_tool(alice, ref):
    body = alice.get(f"refs/{ref}", offset=2999, limit=5).json()
    assert body["text"] == "  2999\trow 002998 " + "x" * 100 + "\n  3000\trow 002999 " + "x" * 100
    assert (body["lines"], body["total_lines"], body["has_more"]) == (2, 3000, False)


def test_offset_beyond_the_end_is_an_empty_slice(alice, ref):
    body = alice.get(f"refs/{ref}", offset=10_000, limit=5).json()
    assert (body["text"], body["total_lines"], body["has_more"]) == ("", 3000, False)


@pytest.mark.parametrize("query", [{"limit": -1}, {"offset": -2}, {"char_offset": -1}])
def test_bad_slice_query_is_422(alice, ref, query):
    response = alice.get(f"refs/{ref}", **query)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "VALIDATION_ERROR"


def test_grep_returns_numbered_matches_with_context(alice, ref):
    body = alice.get(f"refs/{ref}/grep", pattern=r"row 00(1000|2999) ", context=1).json()
    assert [m["line"] for m in body["matches"]] == [1001, 3000]
    first = body["matches"][0]
    assert [b["line"] for b in first["before"]] == [1000]
    assert [a["line"] for a in first["after"]] == [1002]
    assert body["matches"][1]["after"] == []
    assert body["text"].splitlines()[0].startswith("1000-row 000999")
    assert "1001:row 001000" in body["text"]


def test_grep_case_flag_and_max_matches(alice, ref):
    body = alice.get(f"refs/{ref}/grep", pattern="ROW", ignore_case="true", max_matches=3).json()
    assert body["match_count"] == 3 and body["truncated"]


def test_invalid_regex_is_422_with_the_reason(alice, ref):
    response = alice.get(f"refs/{ref}/grep", pattern="([a-z")
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "VALIDATION_ERROR" and "Invalid regular expression" in error["message"]
    assert error["details"]["field"] == "pattern"


def test_runaway_pattern_is_stopped_and_answered_422(alice, make_session, settings):
    settings.CONTEXTSVC_GREP_TIME_LIMIT_MS = 300
    sid = make_session()["id"]
    ref = post(alice, sid, tool_turn("c1", "x" * 40_000 + "\n"))["messages"][-1]["output_ref"]
    response = alice.get(f"refs/{ref}/grep", pattern=r"(x+x+)+y")
    assert response.status_code == 422
    assert response.json()["error"]["details"]["reason"] == "timeout"


def test_another_keys_ref_is_invisible(alice, bob, ref, make_session):
    for path in (f"refs/{ref}", f"refs/{ref}/grep?pattern=row", f"refs/{ref}/raw"):
        response = bob.get(path)
        assert response.status_code == 404, path
        assert response.json()["error"]["code"] == "NOT_FOUND"
    assert alice.get("refs/out_doesnotexist").status_code == 404
    bob_sid = make_session(bob)["id"]
    response = bob.post(f"sessions/{bob_sid}/tools/tool_output_cache/call", {"ref_id": ref})
    assert response.status_code == 404


def test_raw_download_streams_the_exact_bytes(alice, make_session):
    sid = make_session()["id"]
    data = b"caf\xe9\n\xff\xfe raw\n"
    up = alice.request("PUT", f"sessions/{sid}/outputs", raw=data, headers={"X-Tool-Name": "cat"})
    assert up.status_code == 201
    response = alice.get(f"refs/{up.json()['id']}/raw")
    assert b"".join(response.streaming_content) == data


# --- built-in tools ---------------------------------------------------------------------------


def test_builtin_tools_are_listed_in_both_formats(alice):
    body = alice.get("tools").json()
    anthropic = {t["name"]: t for t in body["anthropic"]}
    openai = {t["function"]["name"]: t for t in body["openai"]}
    for name in ("tool_output_cache", "tool_output_cache_grep"):
        assert anthropic[name]["input_schema"]["required"][0] == "ref_id"
        assert openai[name]["type"] == "function"
        assert openai[name]["function"]["parameters"] == anthropic[name]["input_schema"]


def test_builtin_read_cuts_long_lines_like_a_read_tool(alice, make_session):
    sid = make_session(policy={"tool_output_cache": {"max_line_length": 10}})["id"]
    ref = post(alice, sid, tool_turn("c1", "y" * 50 + "\nok\n"))["messages"][-1]["output_ref"]
    body = alice.post(f"sessions/{sid}/tools/tool_output_cache/call", {"ref_id": ref}).json()
    assert body["text"].split("\n")[0] == "     1\t" + "y" * 10 + " […line cut]"
    assert body["cut_lines"] == [1]


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"ref_id": "x", "limit": -1},
        {"ref_id": "x", "bogus": 1},
        {"ref_id": "x", "offset": -1},
        {"ref_id": "x", "char_offset": -1},
    ],
)
def test_builtin_tool_bad_arguments_are_422(alice, make_session, arguments):
    sid = make_session()["id"]
    response = alice.post(f"sessions/{sid}/tools/tool_output_cache/call", arguments)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "VALIDATION_ERROR"


def test_builtin_grep_invalid_pattern_is_422(alice, make_session, ref):
    sid = make_session()["id"]
    response = alice.post(
        f"sessions/{sid}/tools/tool_output_cache_grep/call", {"ref_id": ref, "pattern": "*oops"}
    )
    assert response.status_code == 422


# --- raw upload ---------------------------------------------------------------------------------


def test_raw_upload_streams_past_the_json_body_limit(alice, make_session, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096  # request.body would refuse this upload
    sid = make_session()["id"]
    data = big_text(2000).encode()
    up = alice.request("PUT", f"sessions/{sid}/outputs", raw=data, headers={"X-Tool-Name": "dump"})
    assert up.status_code == 201, up.content
    uploaded = up.json()
    assert (uploaded["byte_size"], uploaded["line_count"], uploaded["tool_name"]) == (
        len(data),
        2000,
        "dump",
    )
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 32 * 1024 * 1024
    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "dump"}]}
    result = {"role": "tool", "tool_call_id": "c1", "output_ref": uploaded["id"]}
    body = post(alice, sid, [call, result])
    assert body["messages"][-1]["output_ref"] == uploaded["id"]
    assert body["messages"][-1]["view"] == "cut"
    shown = context(alice, sid)["messages"][-1]["content"]
    assert shown.startswith("row 000000 ") and f"ref={uploaded['id']}" in shown


def test_small_uploaded_output_goes_into_context_whole(alice, make_session):
    sid = make_session()["id"]
    up = alice.request("PUT", f"sessions/{sid}/outputs", raw=b"tiny \xff\n").json()
    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "cat"}]}
    post(alice, sid, [call, {"role": "tool", "tool_call_id": "c1", "output_ref": up["id"]}])
    assert context(alice, sid)["messages"][-1]["content"] == "tiny \ufffd\n"


def test_upload_over_the_limit_is_413_and_stores_nothing(alice, make_session, settings):
    settings.CONTEXTSVC_MAX_UPLOAD_BYTES = 1000
    sid = make_session()["id"]
    response = alice.request("PUT", f"sessions/{sid}/outputs", raw=b"z" * 1001)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"
    assert not ToolOutput.objects.exists()


def test_uploading_twice_returns_the_same_ref(alice, make_session):
    sid = make_session()["id"]
    first = alice.request("PUT", f"sessions/{sid}/outputs", raw=b"same\n")
    again = alice.request("PUT", f"sessions/{sid}/outputs", raw=b"same\n")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"] and again.json()["deduplicated"]


def test_upload_to_another_keys_session_is_404(bob, make_session):
    sid = make_session()["id"]
    assert bob.request("PUT", f"sessions/{sid}/outputs", raw=b"x").status_code == 404


def test_message_with_content_and_output_ref_is_422(alice, make_session):
    sid = make_session()["id"]
    up = alice.request("PUT", f"sessions/{sid}/outputs", raw=b"x\n").json()
    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "cat"}]}
    result = {"role": "tool", "tool_call_id": "c1", "output_ref": up["id"], "content": "also"}
    post(alice, sid, [call, result], status=422)


def test_message_with_a_foreign_output_ref_is_422(alice, bob, make_session):
    bob_sid = make_session(bob)["id"]
    foreign = bob.request("PUT", f"sessions/{bob_sid}/outputs", raw=b"bob's\n").json()["id"]
    sid = make_session()["id"]
    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "cat"}]}
    for ref in (foreign, "out_unknown"):
        body = post(
            alice,
            sid,
            [call, {"role": "tool", "tool_call_id": "c1", "output_ref": ref}],
            status=422,
        )
        assert body["error"]["details"]["field"] == "messages.1.output_ref"


def test_session_outputs_are_listed(alice, make_session):
    sid = make_session()["id"]
    alice.request("PUT", f"sessions/{sid}/outputs", raw=b"one\n")
    post(alice, sid, tool_turn("c1", "two\n"))
    items = alice.get(f"sessions/{sid}/outputs").json()["items"]
    assert [i["source"] for i in items] == ["message", "upload"]


# --- tool budget (docs/concepts/guard.md#tool-budget) ---------------------------------------------

SMALL = {"context_window": 8_000, "max_output_tokens": 1_000, "buffer_tokens": 0}  # limit 7,000


def test_preview_prices_the_view_and_reserves_nothing(alice, make_session):
    sid = make_session()["id"]
    huge = alice.post(f"sessions/{sid}/tools/preview", {"bytes": 200 * 1024 * 1024}).json()
    assert huge["raw_tokens"] == 200 * 1024 * 1024 // 4
    assert huge["tokens"] < 14_000  # what its 50 KiB view costs
    assert huge["fits"] and huge["can_execute"]
    text = alice.post(f"sessions/{sid}/tools/preview", {"text": "hello world\n"}).json()
    assert 0 < text["tokens"] < 10
    assert alice.post(f"sessions/{sid}/tools/preview", {"tokens": 100}).json()["tokens"] >= 100
    assert alice.get(f"sessions/{sid}/budget").json()["reserved_tokens"] == 0
    assert alice.post(f"sessions/{sid}/tools/preview", {}).status_code == 422
    assert alice.post(f"sessions/{sid}/tools/preview", {"bytes": 1, "tokens": 1}).status_code == 422


def test_reservation_counts_as_pending_until_the_result_arrives(alice, make_session):
    sid = make_session()["id"]
    post(
        alice,
        sid,
        [{"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "bash"}]}],
    )
    before = alice.get(f"sessions/{sid}/budget").json()["guard"]["projected"]
    reserved = alice.post(
        f"sessions/{sid}/tools/reserve", {"tool_call_id": "c1", "bytes": 8000}
    ).json()
    assert reserved["ok"] and reserved["reserved_tokens"] == reserved["tokens"] > 2000
    budget = alice.get(f"sessions/{sid}/budget").json()
    assert budget["reserved_tokens"] == reserved["tokens"]
    assert budget["guard"]["projected"] == before + reserved["tokens"]
    post(alice, sid, [{"role": "tool", "tool_call_id": "c1", "content": "done\n"}])
    assert alice.get(f"sessions/{sid}/budget").json()["reserved_tokens"] == 0


def test_release_drops_reservations(alice, make_session):
    sid = make_session()["id"]
    alice.post(f"sessions/{sid}/tools/reserve", {"tokens": 100})
    alice.post(f"sessions/{sid}/tools/reserve", {"tool_call_id": "c7", "tokens": 100})
    assert (
        alice.post(f"sessions/{sid}/tools/release", {"tool_call_id": "c7"}).json()[
            "released_tokens"
        ]
        >= 100
    )
    assert alice.post(f"sessions/{sid}/tools/release", {}).json()["reserved_tokens"] == 0


def test_reservation_that_does_not_fit_sets_tool_budget_exceeded(alice, make_session):
    # docs/concepts/guard.md#sticky-refusal: once set, every later reservation is refused.
    sid = make_session(**SMALL, policy={"tool_budget_sticky": True})["id"]
    body = alice.post(f"sessions/{sid}/tools/reserve", {"tokens": 7_500}).json()
    assert body["ok"] is False and body["reason"] == "toolBudgetExceeded"
    assert body["can_execute"] is False and body["reserved_tokens"] == 0
    budget = alice.get(f"sessions/{sid}/budget").json()
    assert budget["tool_budget_exceeded"] is True and budget["can_execute_tool"] is False
    assert (budget["status"], budget["final_reason"]) == ("final", "toolBudgetExceeded")
    # Once set, canExecuteTool stays false: no further reservation succeeds.
    assert alice.post(f"sessions/{sid}/tools/reserve", {"tokens": 1}).json()["ok"] is False


def test_output_over_the_limit_is_stored_but_replaced_by_a_failure_view_spec001(
    alice, make_session
):
    # the guard's final turn applies when compaction cannot make room
    # (docs/concepts/guard.md#final-turn).
    policy = {"compaction": {"auto": False}, "tool_budget_sticky": True}
    sid = make_session(**SMALL, policy=policy)["id"]
    post(alice, sid, [{"role": "user", "content": "read the log"}])
    text = big_text(400)  # ~44 KB: a ~11k-token view, over the 7,000 limit
    body = post(alice, sid, tool_turn("c1", text))
    result = body["messages"][-1]
    assert result["view"] == "failed"
    assert result["ref"]["byte_size"] == len(text)  # stored in full all the same
    assert alice.get(f"refs/{result['output_ref']}", offset=400, limit=1).json()["lines"] == 1
    budget = alice.get(f"sessions/{sid}/budget").json()
    assert budget["tool_budget_exceeded"] is True
    assert (budget["status"], budget["final_reason"]) == ("final", "toolBudgetExceeded")
    ctx = context(alice, sid)
    shown = ctx["messages"][-1]["content"]
    assert shown.startswith(
        "[tool output not added: it would exceed the context budget (toolBudgetExceeded)"
    )
    assert f"ref={result['output_ref']}" in shown
    assert [t["name"] for t in ctx["tools"]] == ["final_report"]
    assert budget["guard"]["projected"] < 7_000  # the failure view fits
    # Tools that still run after that get the failure view too.
    later = post(alice, sid, tool_turn("c2", "small\n"))["messages"][-1]
    assert later["view"] == "failed"


def test_overflowing_output_is_cut_to_its_head_and_tail_when_compaction_can_help(
    alice, make_session, monkeypatch, django_capture_on_commit_callbacks
):
    """With auto-compaction on, an output that cannot fit does not end the
    session, and the agent still sees the result it just asked for: it is
    stored in full and shown cut to its first and last lines (half the room
    after the fixed part), with the ref to read the rest."""
    from compaction.services import requests as compaction_requests

    monkeypatch.setattr(compaction_requests, "enqueue_run", lambda run_id, task_id=None: None)
    sid = make_session(**SMALL)["id"]
    post(alice, sid, [{"role": "user", "content": "read the log"}])
    text = big_text(400)  # ~11k tokens: over the 7,000 limit
    with django_capture_on_commit_callbacks(execute=True):
        result = post(alice, sid, tool_turn("c1", text))["messages"][-1]
    assert result["view"] == "cut"
    assert result["ref"]["byte_size"] == len(text)
    assert result["token_count"] <= 3_500
    budget = alice.get(f"sessions/{sid}/budget").json()
    assert budget["status"] == "active" and not budget["tool_budget_exceeded"]
    assert budget["guard"]["status"] != "final"
    ctx = context(alice, sid)
    shown = ctx["messages"][-1]["content"]
    assert shown.startswith("row 000000 ") and "row 000399 " in shown
    assert "row 000200 " not in shown and f"ref={result['output_ref']}" in shown
    assert "final_report" not in [t["name"] for t in ctx.get("tools", [])]
    # The model can still read it in full through the expansion tool.
    page = alice.get(f"refs/{result['output_ref']}", offset=1, limit=2).json()
    assert page["total_lines"] == 400


def test_output_whose_cut_still_overflows_requests_compaction_at_once(
    alice, make_session, monkeypatch, django_capture_on_commit_callbacks
):
    """When even the output's head and tail do not fit beside what the window
    already holds, the session still does not end: an automatic compaction is
    requested at once, whatever the guard tier."""
    from compaction.models import CompactionRun
    from compaction.services import requests as compaction_requests

    sent = []
    monkeypatch.setattr(
        compaction_requests, "enqueue_run", lambda run_id, task_id=None: sent.append(run_id)
    )
    sid = make_session(**SMALL)["id"]
    post(alice, sid, [{"role": "user", "content": "read the log " + "w " * 5_000}])
    with django_capture_on_commit_callbacks(execute=True):
        result = post(alice, sid, tool_turn("c1", big_text(400)))["messages"][-1]
    assert result["view"] == "cut"
    budget = alice.get(f"sessions/{sid}/budget").json()
    assert budget["status"] == "active" and not budget["tool_budget_exceeded"]
    runs = CompactionRun.objects.filter(session__external_id=sid, trigger="auto")
    assert runs.count() == 1
    assert sent == [runs.get().pk]  # sent to a worker once the append committed


def test_output_that_fits_is_not_failed(alice, make_session):
    sid = make_session(**SMALL)["id"]
    body = post(alice, sid, tool_turn("c1", big_text(20)))
    assert body["messages"][-1]["view"] == "full" and not body["budget"]["tool_budget_exceeded"]


def test_policy_validation_of_tool_output_cache(alice):
    for bad in ({"trim_hysteresis": 1.0}, {"max_line_length": 0}, {"preset": "zip"}, {"nope": 1}):
        response = alice.post("sessions", {"model": "gpt-4o", "policy": {"tool_output_cache": bad}})
        assert response.status_code == 422, bad


def test_chunked_upload_is_refused_where_the_server_cannot_end_it(alice, make_session):
    # Django's test client, like the dev server, gives no wsgi.input_terminated.
    sid = make_session()["id"]
    response = alice.client.generic(
        "PUT",
        f"/api/v1/sessions/{sid}/outputs",
        data=b"",
        content_type="application/octet-stream",
        headers={"Authorization": f"Bearer {alice.raw_key}", "Transfer-Encoding": "chunked"},
    )
    assert response.status_code == 422
    assert response.json()["error"]["details"] == {"field": "Content-Length"}
    assert not ToolOutput.objects.exists()


def _chunked_put(alice, sid: str, body: bytes) -> tuple[int, dict]:
    """PUT a chunked upload the way gunicorn hands it to Django: de-chunked,
    no CONTENT_LENGTH, and ``wsgi.input_terminated`` (read to EOF)."""
    import io

    response = alice.client.generic(
        "PUT",
        f"/api/v1/sessions/{sid}/outputs",
        headers={
            "Authorization": f"Bearer {alice.raw_key}",
            "Transfer-Encoding": "chunked",
            "X-Tool-Name": "dump_logs",
        },
        **{"wsgi.input": io.BytesIO(body), "wsgi.input_terminated": True},
    )
    assert "CONTENT_LENGTH" not in response.wsgi_request.META
    return response.status_code, response.json()


def test_chunked_upload_behind_gunicorn_is_stored_whole(alice, make_session):
    sid = make_session()["id"]
    body = big_text(3_000).encode()  # ~300 KB: more than one storage chunk
    status, out = _chunked_put(alice, sid, body)
    assert status == 201, out
    assert out["byte_size"] == len(body) and out["line_count"] == 3_000
    raw = alice.get(f"refs/{out['ref']}/raw")
    assert b"".join(raw.streaming_content) == body
    assert ToolOutput.objects.get(ref=out["ref"]).tool_name == "dump_logs"


def test_chunked_upload_over_the_limit_is_413_and_stores_nothing(alice, make_session, settings):
    settings.CONTEXTSVC_MAX_UPLOAD_BYTES = 10_000
    sid = make_session()["id"]
    status, out = _chunked_put(alice, sid, b"x" * 10_001)
    assert status == 413 and out["error"]["details"] == {"max_bytes": 10_000}
    assert not ToolOutput.objects.exists()
