"""Which session a call belongs to: the client's own id and the side-request rule (no database)."""

from __future__ import annotations

from contextsvc.engine.providers import openai_chat
from contextsvc.engine.providers.anthropic import request_to_transcript
from contextsvc.engine.user_agents import client_label
from proxy.providers import registered
from proxy.services.identity import client_session_id, is_side_request, side_session_id
from sessions.models import Session

BILLING = {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332.0b9;"}
PROMPT = {"type": "text", "text": "You are a Claude agent."}


def body(system, max_tokens: int = 32_000) -> dict:
    return {
        "model": "m",
        "max_tokens": max_tokens,
        "system": system,
        "messages": [{"role": "user", "content": "hi"}],
    }


def main_session(system) -> Session:
    converted = request_to_transcript(body(system))
    sections = [
        {"name": s.name, "content": s.content, "cacheable": s.cacheable, "kind": "base"}
        for s in converted.sections
    ]
    return Session(external_id="cc_x", sections=sections)


def test_the_client_session_header_names_a_session_only_when_it_is_a_plain_id():
    assert client_session_id({"x-claude-code-session-id": "3c68-a4c"}) == "cc_3c68-a4c"
    assert client_session_id({"x-claude-code-session-id": "a b"}) is None
    assert client_session_id({}) is None


def test_opencodes_session_header_names_a_session_of_its_own_prefix():
    sid = "ses_dda00c1deffemEWaGPjH57dsMS"
    assert client_session_id({"x-session-id": sid}) == f"oc_{sid}"
    assert client_session_id({"x-session-id": "a/b"}) is None
    # Claude Code's header is the one that names it when a request carries both.
    both = {"x-claude-code-session-id": "3c68", "x-session-id": sid}
    assert client_session_id(both) == "cc_3c68"


def test_another_system_prompt_or_a_one_token_probe_is_a_side_request():
    main = main_session([BILLING, PROMPT])
    assert not is_side_request(
        main, body([BILLING, PROMPT]), request_to_transcript(body([BILLING, PROMPT]))
    )
    title = body("Write a short title for this conversation.")
    assert is_side_request(main, title, request_to_transcript(title))
    probe = body([BILLING, PROMPT], max_tokens=1)
    assert is_side_request(main, probe, request_to_transcript(probe))


def test_the_billing_line_that_changes_between_runs_is_not_the_conversations_identity():
    main = main_session([BILLING, PROMPT])
    other_run = [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332.6b9;"},
        PROMPT,
    ]
    assert not is_side_request(main, body(other_run), request_to_transcript(body(other_run)))


def test_a_session_without_a_system_prompt_yet_takes_the_first_call_as_its_own():
    fresh = Session(external_id="cc_x", sections=[])
    assert not is_side_request(fresh, body("anything"), request_to_transcript(body("anything")))


def test_a_call_without_tools_from_a_coding_agent_is_a_side_request_even_first():
    """Gemini CLI's routing question comes before its conversation: it must not become it."""
    fresh = Session(external_id="run", sections=[])
    routing = body("You are a routing classifier.")
    gemini = client_label("GeminiCLI-tui/0.61.0/gemini-fake-pro (linux; x64; terminal)")
    assert gemini == "Gemini CLI 0.61.0"
    assert is_side_request(fresh, routing, request_to_transcript(routing), gemini)
    # The same call from a client that may well chat without tools is its conversation.
    sdk = client_label("Anthropic/Python 0.40.0")
    assert not is_side_request(fresh, routing, request_to_transcript(routing), sdk)
    with_tools = {**routing, "tools": [{"name": "run", "input_schema": {"type": "object"}}]}
    assert not is_side_request(fresh, with_tools, request_to_transcript(with_tools), gemini)


def test_opencodes_title_request_is_a_side_request_even_as_the_runs_first_call():
    """opencode sends its title request alongside its first main call: either may come first."""
    fresh = Session(external_id="oc_ses_x", sections=[])
    opencode = client_label("opencode/1.18.33 ai-sdk/provider-utils/4.0.23 runtime/bun/1.3.14")
    title = {
        "model": "m",
        "max_tokens": 32_000,
        "stream": True,
        "messages": [
            {
                "role": "system",
                "content": "You are a title generator. You output ONLY a thread title.",
            },
            {"role": "user", "content": "Generate a title for this conversation:\n"},
            {"role": "user", "content": '"Fix the parser"'},
        ],
    }
    assert is_side_request(fresh, title, openai_chat.request_to_transcript(title), opencode)
    tool = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
    main = {**title, "tools": [tool]}
    assert not is_side_request(fresh, main, openai_chat.request_to_transcript(main), opencode)


def test_a_gemini_side_session_is_named_by_its_own_instruction_and_first_message():
    main = Session(external_id="gemini-run")
    dialect = registered("gemini")

    def call(system: str, first: str) -> dict:
        return {
            "systemInstruction": {"parts": [{"text": system}]},
            "contents": [{"role": "user", "parts": [{"text": first}]}],
        }

    compress = side_session_id(main, "owner", call("Summarise.", "context"), dialect)
    route = side_session_id(main, "owner", call("Route.", "context"), dialect)
    assert compress.startswith("gemini-run~") and route.startswith("gemini-run~")
    assert compress != route
    assert compress == side_session_id(main, "owner", call("Summarise.", "context"), dialect)
