"""Property: Gemini ``contents`` go to the transcript and back unchanged, and built again
for the API they pass the fake Gemini server's checks.

Generated conversations as a Gemini client holds them: text, images and
other parts, thought parts with signatures, calls with and without ids (the
same call repeated, several in a turn; responses with the client's own id for
an id-less call, as Gemini CLI sends), each answered in the next user turn
by output, error or JSON responses, sometimes followed by user text.
"""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from contextsvc.engine.build import ContextParts, build_request
from contextsvc.engine.messages import Message, ToolCall, ToolDef
from contextsvc.engine.providers import gemini
from contextsvc.engine.providers.gemini_contents import contents_from_transcript
from fakes.gemini_rules import validate

NAMES = st.sampled_from(["run_shell_command", "read_file", "glob"])
TEXT = st.text(max_size=12)
USER_PART = st.one_of(
    st.builds(lambda t: {"text": t}, TEXT),
    st.just({"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}),
    st.just({"fileData": {"mimeType": "text/plain", "fileUri": "gs://b/f.txt"}}),
)
RESULT = st.one_of(
    st.builds(lambda t: {"output": t}, TEXT),
    st.builds(lambda t: {"error": t}, TEXT),
    st.just({"output": 3}),
    st.just({}),
    st.just({"files": ["a", "b"], "exit": 0}),
)


@st.composite
def conversations(draw) -> list[dict]:
    contents: list[dict] = []
    for turn in range(draw(st.integers(1, 5))):
        contents.append(
            {"role": "user", "parts": draw(st.lists(USER_PART, min_size=1, max_size=3))}
        )
        parts: list[dict] = []
        if draw(st.booleans()):
            parts.append({"text": draw(TEXT), "thought": True, "thoughtSignature": "sig"})
        parts += draw(st.lists(st.builds(lambda t: {"text": t}, TEXT), max_size=2))
        calls = []
        for k in range(draw(st.integers(0, 3))):
            function = {"name": draw(NAMES), "args": draw(st.sampled_from([{}, {"p": "a"}]))}
            if draw(st.booleans()):
                function["id"] = f"c{turn}_{k}"
            part = {"functionCall": function}
            if draw(st.booleans()):
                part["thoughtSignature"] = "s"
            calls.append(function)
            parts.append(part)
        contents.append({"role": "model", "parts": parts})
        if calls:
            answers = []
            for function in calls:
                response = {"name": function["name"], "response": draw(RESULT)}
                if "id" in function:
                    response["id"] = function["id"]
                elif draw(st.booleans()):  # Gemini CLI's own id for a call sent without one
                    response["id"] = f"{function['name']}-{turn}-{draw(st.integers(0, 9))}"
                answers.append({"functionResponse": response})
            extra = draw(st.lists(USER_PART, max_size=1))
            contents.append({"role": "user", "parts": answers + extra})
    return contents


def engine_messages(transcript: list[dict]) -> list[Message]:
    """Transcript dicts as the store hands them to the build."""
    out = []
    for seq, m in enumerate(transcript, 1):
        calls = tuple(ToolCall(c["id"], c["name"], c["arguments"]) for c in m.get("tool_calls", ()))
        out.append(
            Message(
                role=m["role"],
                content=m["content"],
                tool_calls=calls,
                tool_call_id=m.get("tool_call_id"),
                name=m.get("name"),
                reasoning=m.get("reasoning"),
                seq=seq,
            )
        )
    return out


@settings(max_examples=300, deadline=None)
@given(contents=conversations())
def test_contents_round_trip_through_the_transcript(contents):
    transcript = gemini.contents_to_transcript(copy.deepcopy(contents))
    assert contents_from_transcript(transcript) == contents
    # Every result answers a call it was posted for.
    calls = {c["id"] for m in transcript for c in m.get("tool_calls", ())}
    assert all(m["tool_call_id"] in calls for m in transcript if m["role"] == "tool")


@settings(max_examples=300, deadline=None)
@given(contents=conversations(), final=st.sampled_from([None, "Finish now."]))
def test_posted_gemini_contents_build_a_request_the_api_accepts(contents, final):
    transcript = gemini.contents_to_transcript(contents)
    parts = ContextParts(
        model="gemini-2.5-pro",
        max_output_tokens=100,
        messages=engine_messages(transcript),
        tools=[ToolDef(name=n) for n in ("run_shell_command", "read_file", "glob")],
        notes=("[status]",),
        final_instruction=final,
    )
    body = build_request("gemini", parts)
    validate(body)
    # Ids the client never sent are never sent back.
    sent = {
        p["functionCall"].get("id")
        for c in body["contents"]
        for p in c["parts"]
        if "functionCall" in p
    }
    assert sent <= {
        f["id"] for c in contents for p in c["parts"] if (f := p.get("functionCall")) and "id" in f
    } | {None}
