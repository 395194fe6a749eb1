"""The client label from a request's user agent (the session list's "client" column)."""

import pytest
from contextsvc_client._core import USER_AGENT, auth_headers

from contextsvc.engine.user_agents import MAX_LABEL, client_label, first_user_text


@pytest.mark.parametrize(
    ("agent", "originator", "label"),
    [
        # Claude Code's requests through the Anthropic SDK it bundles
        ("claude-cli/1.0.83 (external, cli)", None, "Claude Code 1.0.83"),
        ("claude-cli/2.0.14 (external, sdk-cli)", None, "Claude Code 2.0.14"),
        # Codex CLI (Rust): user agent and originator header
        (
            "codex_cli_rs/0.20.0 (Mac OS 14.5.0; arm64) iTerm.app/3.5.10",
            "codex_cli_rs",
            "Codex CLI 0.20.0",
        ),
        ("codex_exec/0.46.0 (Ubuntu 24.4.0; x86_64) unknown", "codex_exec", "Codex CLI 0.46.0"),
        ("reqwest/0.12", "codex_cli_rs", "Codex CLI"),
        # opencode, through the AI SDK it bundles (its own name first, not the SDK's)
        (
            "opencode/1.18.33 ai-sdk/provider-utils/4.0.23 runtime/bun/1.3.14",
            None,
            "opencode 1.18.33",
        ),
        # the official SDKs
        ("Anthropic/Python 0.40.0", None, "Anthropic SDK Python 0.40.0"),
        ("AsyncAnthropic/Python 0.40.0", None, "Anthropic SDK Python 0.40.0"),
        ("Anthropic/JS 0.30.1", None, "Anthropic SDK JS 0.30.1"),
        ("OpenAI/Python 1.51.0", None, "OpenAI SDK Python 1.51.0"),
        ("AsyncOpenAI/Python 1.51.0", None, "OpenAI SDK Python 1.51.0"),
        ("OpenAI/JS 4.67.3", None, "OpenAI SDK JS 4.67.3"),
        # this project's Python client
        ("contextsvc-client/0.1.0 (python)", None, "contextsvc client 0.1.0"),
        # anything else: its first product token
        ("python-httpx/0.27.2", None, "python-httpx 0.27.2"),
        ("curl/8.5.0", None, "curl 8.5.0"),
        ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36", None, "Mozilla 5.0"),
        ("", None, ""),
        (None, None, ""),
    ],
)
def test_client_label_names_known_clients(agent, originator, label):
    assert client_label(agent, originator) == label


def test_client_label_is_short_for_a_long_unknown_agent():
    assert len(client_label("x" * 500)) == MAX_LABEL


def test_our_python_client_sends_the_agent_the_label_recognises():
    assert auth_headers("k", None)["User-Agent"] == USER_AGENT
    assert client_label(USER_AGENT).startswith("contextsvc client ")


def test_first_user_text_joins_text_parts_on_one_line_and_cuts():
    assert first_user_text({"role": "user", "content": "fix\n  the   bug"}) == "fix the bug"
    parts = [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]
    assert first_user_text({"role": "user", "content": parts}) == "a b"
    assert len(first_user_text({"role": "user", "content": "y" * 900})) == 200
    assert first_user_text({"role": "user", "content": None}) == ""
