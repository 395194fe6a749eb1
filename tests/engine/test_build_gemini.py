"""Property: every Gemini body the assembler builds passes the fake Gemini API's checks.

The generated transcripts of ``test_wellformed_property`` (cut windows,
summaries in either role, orphan results, unanswered and late calls, reused
ids, blank text, images) are built in the ``gemini`` format; each body must
pass ``fakes.gemini_rules``, strictly alternate user / model turns starting
with a user turn, send every call with its response and keep every tool
output the window holds.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from contextsvc.engine.build import ContextParts, build_request
from contextsvc.engine.messages import Message, PromptSection, ToolCall, ToolDef
from contextsvc.engine.summary_prefix import prefix_body
from fakes.gemini_rules import validate
from tests.engine.test_wellformed_property import parts_for
from tests.fakes.transcripts import windows


def check(body: dict, window) -> None:
    validate(body)
    roles = [c["role"] for c in body["contents"]]
    assert roles[0] == "user"
    assert all(a != b for a, b in zip(roles, roles[1:], strict=False)), roles
    assert "model" not in body and "cache_control" not in json.dumps(body)
    text = json.dumps(body)
    for msg in window:
        if msg.role == "tool" and msg.context_text.strip():
            assert json.dumps(msg.context_text)[1:-1] in text


@settings(max_examples=400, deadline=None)
@given(
    t=windows(),
    notes=st.sampled_from([(), ("[status: 40%]",)]),
    final=st.sampled_from([None, "Finish now."]),
    summary_role=st.sampled_from(["user", "system"]),
    plain=st.booleans(),
)
def test_every_built_gemini_request_passes_the_fake_apis_checks(
    t, notes, final, summary_role, plain
):
    parts = parts_for(
        t, notes=notes, final_instruction=final, summary_role=summary_role, plain=plain
    )
    check(build_request("gemini", parts), t.window)


@settings(max_examples=100, deadline=None)
@given(t=windows(), final=st.sampled_from([None, "Finish now."]))
def test_an_empty_window_builds_a_valid_gemini_request_too(t, final):
    t.window_start = len(t.messages)
    check(build_request("gemini", parts_for(t, final_instruction=final)), t.window)


def test_layout_system_history_tools_tail_and_no_markers():
    history = [
        Message(role="user", content="Fix it", seq=1),
        Message(
            role="assistant",
            content="Looking.",
            tool_calls=(ToolCall(id="t1", name="bash", arguments={"command": "ls"}),),
            seq=2,
        ),
        # Posted without its name: the response takes its call's.
        Message(role="tool", content="a.py", tool_call_id="t1", seq=3),
        Message(role="system", content="Be careful.", seq=4),
        Message(role="assistant", content="Done.", seq=5),
    ]
    parts = ContextParts(
        model="gemini-2.5-pro",
        max_output_tokens=512,
        sections=[PromptSection(name="base", content="You are an agent.")],
        messages=history,
        tools=[ToolDef(name="bash", description="Run", input_schema={"type": "object"})],
        notes=("[context: 10% used]",),
        final_instruction="Finish now.",
    )
    body = build_request("gemini", parts)
    validate(body)
    assert body["systemInstruction"] == {"parts": [{"text": "You are an agent."}]}
    assert body["generationConfig"] == {"maxOutputTokens": 512}
    assert body["tools"] == [
        {
            "functionDeclarations": [
                {"name": "bash", "description": "Run", "parametersJsonSchema": {"type": "object"}}
            ]
        }
    ]
    contents = body["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user", "model", "user"]
    assert contents[1]["parts"] == [
        {"text": "Looking."},
        {"functionCall": {"name": "bash", "args": {"command": "ls"}, "id": "t1"}},
    ]
    response, reminder = contents[2]["parts"]
    assert response == {
        "functionResponse": {"name": "bash", "id": "t1", "response": {"output": "a.py"}}
    }
    assert reminder["text"].endswith("Be careful.") and reminder["text"].startswith("[System")
    assert contents[-1]["parts"] == [{"text": "[context: 10% used]"}, {"text": "Finish now."}]


def test_a_summary_call_in_gemini_form_allows_no_function_call():
    parts = ContextParts(
        model="gemini-2.5-flash",
        max_output_tokens=100,
        messages=[Message(role="user", content="Fix it", seq=1)],
        tools=[ToolDef(name="bash")],
    )
    body = prefix_body("gemini", parts, "Summarise <summary>", "gemini-2.5-flash", 200)
    validate(body)
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "NONE"}}
    assert "tool_choice" not in body
    assert body["contents"][-1]["parts"][-1] == {"text": "Summarise <summary>"}
