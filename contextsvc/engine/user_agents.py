"""Which client sent a request, from its ``User-Agent`` (and Codex's ``originator`` header).

Pure parsing: a short label for the dashboard's session list ("Claude Code 1.0.83",
"Codex CLI 0.20.0", "opencode 1.18.33", "Anthropic SDK Python 0.40.0", ...). An
unknown agent gives its first product token, cut to ``MAX_LABEL`` characters; no
header gives "".
"""

from __future__ import annotations

import re

MAX_LABEL = 64

# (pattern on the user agent, label; {v} is the version when the pattern captures one)
_KNOWN: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^claude-cli/(\S+)", re.I), "Claude Code {v}"),
    (re.compile(r"^codex_cli_rs/(\S+)", re.I), "Codex CLI {v}"),
    (re.compile(r"^codex_exec/(\S+)", re.I), "Codex CLI {v}"),
    (re.compile(r"^GeminiCLI(?:-\w+)?/([^/\s]+)", re.I), "Gemini CLI {v}"),
    # opencode: "opencode/1.18.33 ai-sdk/provider-utils/4.0.23 runtime/bun/1.3.14"
    (re.compile(r"^opencode/(\S+)", re.I), "opencode {v}"),
    (re.compile(r"^contextsvc-client/(\S+)", re.I), "contextsvc client {v}"),
    (re.compile(r"^Anthropic/Python (\S+)"), "Anthropic SDK Python {v}"),
    (re.compile(r"^AsyncAnthropic/Python (\S+)"), "Anthropic SDK Python {v}"),
    (re.compile(r"^Anthropic/JS (\S+)"), "Anthropic SDK JS {v}"),
    (re.compile(r"^(?:Async)?OpenAI/Python (\S+)"), "OpenAI SDK Python {v}"),
    (re.compile(r"^OpenAI/JS (\S+)"), "OpenAI SDK JS {v}"),
)
# Coding agents whose every main call offers tools: a call of theirs without any is a
# side request (a title, a routing or compression question), never their conversation.
TOOL_AGENTS = ("Claude Code", "Codex CLI", "Gemini CLI", "opencode")
_ORIGINATORS = {"codex_cli_rs": "Codex CLI", "codex_exec": "Codex CLI"}
_TOKEN = re.compile(r"^([A-Za-z0-9_.\-]+)(?:/([A-Za-z0-9_.\-+]+))?")


def client_label(user_agent: str | None, originator: str | None = None) -> str:
    """A short, readable name of the client; "" when the request names none."""
    agent = (user_agent or "").strip()
    for pattern, label in _KNOWN:
        match = pattern.match(agent)
        if match:
            return label.format(v=match.group(1))[:MAX_LABEL]
    origin = (originator or "").strip()
    if origin in _ORIGINATORS:
        return _ORIGINATORS[origin]
    match = _TOKEN.match(agent)
    if match:
        name, version = match.groups()
        return (f"{name} {version}" if version else name)[:MAX_LABEL]
    return (origin or agent)[:MAX_LABEL]


def is_tool_agent(label: str) -> bool:
    """Whether ``label`` (``client_label``'s) names one of the ``TOOL_AGENTS``."""
    return label.startswith(TOOL_AGENTS)


def first_user_text(message: dict[str, object], limit: int = 200) -> str:
    """The text of a user message (string content or its text parts), on one line, cut to ``limit``."""
    content = message.get("content")
    # Only the head of each text is read: a first message of megabytes costs no more.
    head = limit * 20
    if isinstance(content, str):
        text = content[:head]
    elif isinstance(content, list):
        text = " ".join(
            str(part.get("text") or "")[:head]
            for part in content
            if isinstance(part, dict) and part.get("type") in ("text", "input_text")
        )
    else:
        text = ""
    return " ".join(text.split())[:limit]
