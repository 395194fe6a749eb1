"""Property: every body the assembler builds passes the provider's request checks.

Generated transcripts (tests/fakes/transcripts.py) are cut, summarised and
built in the three provider formats with and without tools, a cache plan,
notes, a final instruction and a summary in either role; each body must pass
the fake Messages server's validation, the Chat Completions and Responses
rules, strictly alternate (Anthropic), and keep every tool output the window
holds. Empty windows included: a request always has a user turn.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from contextsvc.engine.build import ContextParts, build_request
from contextsvc.engine.messages import PromptSection, ToolDef
from contextsvc.engine.prompt import CachePlan
from fakes.anthropic_rules import validate
from fakes.openai_rules import validate_chat
from fakes.responses_rules import validate_responses
from tests.fakes.transcripts import Transcript, windows


def parts_for(t: Transcript, **kw) -> ContextParts:
    return ContextParts(
        model="m",
        max_output_tokens=100,
        sections=[PromptSection(name="base", content="You are an agent.")],
        retain=t.retain,
        summary=t.summary,
        messages=t.window,
        tools=[ToolDef(name=n) for n in t.tool_names],
        **kw,
    )


def check_bodies(parts: ContextParts, window) -> None:
    anthropic = build_request("anthropic", parts)
    openai = build_request("openai", parts)
    # Every body is sendable, an empty window's too (engine.wellformed.with_user_turn).
    validate(anthropic)
    validate_chat(openai)
    validate_responses(build_request("responses", parts), set())
    roles = [m["role"] for m in anthropic["messages"]]
    assert all(a != b for a, b in zip(roles, roles[1:], strict=False)), roles
    # Nothing the model should see is lost: every tool output in the window is sent.
    for body in (anthropic, openai):
        text = json.dumps(body)
        for msg in window:
            if msg.role == "tool" and msg.context_text.strip():
                assert json.dumps(msg.context_text)[1:-1] in text


@settings(max_examples=400, deadline=None)
@given(
    t=windows(),
    cache=st.sampled_from([None, CachePlan(system=(0,), history=True, tools=True)]),
    notes=st.sampled_from([(), ("[status: 40%]",)]),
    final=st.sampled_from([None, "Finish now."]),
    summary_role=st.sampled_from(["user", "system"]),
)
def test_every_built_request_passes_both_providers_checks(t, cache, notes, final, summary_role):
    if cache is not None and not t.tool_names:
        cache = CachePlan(system=(0,), history=True)
    parts = parts_for(
        t, cache=cache, notes=notes, final_instruction=final, summary_role=summary_role
    )
    check_bodies(parts, t.window)


@settings(max_examples=100, deadline=None)
@given(
    t=windows(),
    cache=st.sampled_from([None, CachePlan(system=(0,), history=True)]),
    notes=st.sampled_from([(), ("[status: 40%]",)]),
    final=st.sampled_from([None, "Finish now."]),
    summary_role=st.sampled_from(["user", "system"]),
)
def test_every_built_request_from_an_empty_window_passes_too(t, cache, notes, final, summary_role):
    # Every message left the window (a compaction, a session with a system
    # prompt only): the generator reaches this rarely, so it is forced here.
    t.window_start = len(t.messages)
    parts = parts_for(
        t, cache=cache, notes=notes, final_instruction=final, summary_role=summary_role
    )
    check_bodies(parts, t.window)


@settings(max_examples=100, deadline=None)
@given(t=windows())
def test_plain_mode_bodies_pass_too(t):
    check_bodies(parts_for(t, plain=True, notes=("[note]",)), t.window)
