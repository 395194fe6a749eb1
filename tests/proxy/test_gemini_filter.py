"""The Gemini stream filter and whole-response helpers (no database, no upstream)."""

from __future__ import annotations

import json
from typing import Any

from contextsvc.engine.providers.sse import SseEvent
from proxy.providers import GEMINI
from proxy.providers.gemini_stream import GeminiFilter
from proxy.services.builtins import without_builtins
from proxy.services.final import final_tool_to_answer


def chunk(*parts: dict[str, Any], finish: str | None = None) -> SseEvent:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return SseEvent(data=json.dumps({"candidates": [candidate], "responseId": "r1"}))


def chunks(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in raw.decode().splitlines() if line.startswith("data: ")]


def texts(raw: bytes) -> list[str]:
    return [
        p.get("text", "")
        for c in chunks(raw)
        for p in c["candidates"][0]["content"]["parts"]
        if "text" in p
    ]


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"functionCall": {"name": name, "args": args}}


def test_builtin_calls_are_left_out_and_the_end_held_until_the_last_round():
    relay = GeminiFilter(frozenset({"history_search"}))
    out = relay.feed(chunk({"text": "Looking."}))
    assert texts(out) == ["Looking."]
    assert relay.feed(chunk(call("history_search", query="x"))) == b""
    assert relay.feed(chunk({"text": ""}, finish="STOP")) == b""
    assert relay.end_round(again=True) == b""
    out = relay.feed(chunk({"text": "Found it."}, call("run_shell_command", command="ls")))
    assert [p for c in chunks(out) for p in c["candidates"][0]["content"]["parts"]] == [
        {"text": "Found it."},
        call("run_shell_command", command="ls"),
    ]
    assert relay.feed(chunk({"text": ""}, finish="STOP")) == b""
    tail = relay.end_round(again=False)
    assert chunks(tail)[-1]["candidates"][0]["finishReason"] == "STOP"


def test_a_final_report_and_a_note_go_out_as_text_before_the_end():
    relay = GeminiFilter(frozenset(), "final_report")
    assert relay.feed(chunk(call("final_report", report="All done."), finish="STOP")) == b""
    tail = relay.end_round(again=False, note="(stopped)")
    assert texts(tail) == ["All done.", "(stopped)"]
    assert chunks(tail)[-1]["candidates"][0]["finishReason"] == "STOP"
    assert chunks(tail)[0]["responseId"] == "r1"


def test_whole_responses_lose_builtin_calls_and_gain_notes_and_reports():
    response = json.loads(chunk({"text": "a"}, call("history_search"), call("ls")).data)
    stripped = GEMINI.strip_calls(response, {"history_search"})
    assert stripped["candidates"][0]["content"]["parts"] == [{"text": "a"}, call("ls")]
    noted = GEMINI.with_note(stripped, "note")
    assert noted["candidates"][0]["content"]["parts"][-1] == {"text": "note"}
    final = json.loads(chunk(call("final_report", report="R")).data)
    assert GEMINI.final_as_text(final, "final_report")["candidates"][0]["content"]["parts"] == [
        {"text": "R"}
    ]
    assert GEMINI.strip_calls({"promptFeedback": {}}, {"x"}) == {"promptFeedback": {}}


def test_gemini_declarations_are_read_for_the_final_tool_and_the_last_round():
    tools = [{"functionDeclarations": [{"name": "ls"}, {"name": "history_search"}]}]
    assert final_tool_to_answer(tools, "history_search", set()) == "history_search"
    assert final_tool_to_answer(tools, "history_search", {"history_search"}) is None
    body = without_builtins({"tools": tools, "contents": []}, frozenset({"history_search"}))
    assert body["tools"] == [{"functionDeclarations": [{"name": "ls"}]}]
    only = [{"functionDeclarations": [{"name": "history_search"}]}]
    assert "tools" not in without_builtins({"tools": only}, frozenset({"history_search"}))


def test_gemini_errors_and_overflow():
    assert GEMINI.error_body(404, "x") == {
        "error": {"code": 404, "message": "x", "status": "NOT_FOUND"}
    }
    said = {
        "error": {
            "code": 400,
            "message": "The input token count (1200) exceeds the maximum number of tokens"
            " allowed (1000).",
            "status": "INVALID_ARGUMENT",
        }
    }
    assert GEMINI.is_overflow(400, said)
    assert not GEMINI.is_overflow(429, said)
    assert GEMINI.reported_window(said) == 1000
    assert GEMINI.reported_size(said) == 1200
