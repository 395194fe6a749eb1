"""The quick start's demo: an operator login, an agent key and a session with a few
turns, so the service has something to show the moment it starts, and the lines
``bin/run`` ends with (service URL, agent key, operator login, a ready curl).

Idempotent: the demo key is kept in ``demo_key.txt`` in ``CONTEXTSVC_VAR_DIR`` (the
quick start's own data folder) and reused while it is still valid; the session
is made only when absent.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model

from contextsvc.settings_env import env_int, env_str
from sessions.models import AgentKey, Session, hash_key
from sessions.services.append import session_append_messages
from sessions.services.keys import agent_key_create
from sessions.services.sessions import session_create, session_set_sections
from sessions.services.tools import session_set_tools

DEMO_SESSION = "demo"


@dataclass(frozen=True, slots=True)
class Demo:
    username: str
    password: str
    key: str  # the raw agent key


def demo_conversation() -> list[list[dict]]:
    """Batches as an agent loop would post them: one LLM call per batch."""
    listing = "\n".join(f"src/module_{i:02d}.py" for i in range(40))
    log = "\n".join(
        f"tests/test_parser.py::test_case_{i} {'FAILED' if i % 7 == 0 else 'PASSED'}"
        for i in range(300)
    )
    return [
        [
            {
                "role": "user",
                "content": "The parser tests fail on Python 3.11. Find out why and fix it.",
            }
        ],
        [
            {
                "role": "assistant",
                "content": "I'll look at the repository layout first.",
                "tool_calls": [
                    {"id": "call_ls", "name": "bash", "arguments": {"command": "ls src"}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_ls", "content": listing},
        ],
        [
            {
                "role": "assistant",
                "content": "Now the failing tests.",
                "tool_calls": [
                    {
                        "id": "call_pytest",
                        "name": "bash",
                        "arguments": {"command": "pytest tests -q"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_pytest", "content": log},
        ],
        [
            {
                "role": "assistant",
                "content": (
                    "Every 7th case fails: the tokenizer in src/module_07.py assumes "
                    "dict ordering of Python < 3.7. I'll fix the sort key."
                ),
            }
        ],
    ]


def _demo_key() -> tuple[AgentKey, str]:
    key_file = settings.VAR_DIR / "demo_key.txt"
    raw = key_file.read_text().strip() if key_file.exists() else ""
    key = (
        AgentKey.objects.filter(key_hash=hash_key(raw), revoked_at__isnull=True).first()
        if raw
        else None
    )
    if key is None:
        key, raw = agent_key_create(name="demo-agent")
        key_file.parent.mkdir(parents=True, exist_ok=True)
        key_file.write_text(raw + "\n")
        key_file.chmod(0o600)
    return key, raw


def _demo_session(key: AgentKey) -> None:
    session = session_create(
        owner=key,
        data={
            "id": DEMO_SESSION,
            "agent": "demo-agent",
            "model": "claude-sonnet-4-6",
            "context_window": 32_000,
            "max_output_tokens": 4_096,
            "buffer_tokens": 2_048,
        },
    )
    session = session_set_sections(
        session=session,
        sections=[
            {
                "name": "base",
                "kind": "base",
                "cacheable": True,
                "content": "You are a careful software engineer. Work in small verified steps.",
            },
            {
                "name": "AGENT.md",
                "kind": "rules",
                "cacheable": True,
                "content": "Run the tests before and after every change. Never push to main.",
            },
        ],
    )
    session = session_set_tools(
        session=session,
        tools=[
            {
                "name": "bash",
                "description": "Run a shell command and return its output.",
                "category": "builtin",
                "input_schema": {
                    "type": "object",
                    "properties": {"command": {"type": "string"}},
                    "required": ["command"],
                },
            }
        ],
    )
    for batch in demo_conversation():
        session_append_messages(session=session, messages=batch)


def demo_seed() -> Demo:
    """The operator, the demo key and the demo session, each made only when absent."""
    username = env_str("CONTEXTSVC_DEMO_USER")
    password = env_str("CONTEXTSVC_DEMO_PASSWORD")
    user_model = get_user_model()
    if not user_model.objects.filter(username=username).exists():
        user_model.objects.create_superuser(username=username, email="", password=password)
    key, raw = _demo_key()
    if not Session.objects.filter(owner=key, external_id=DEMO_SESSION).exists():
        _demo_session(key)
    return Demo(username=username, password=password, key=raw)


def demo_banner(demo: Demo) -> str:
    """What bin/run ends with: where the service is, the key, the login, a curl to try."""
    host = env_str("HOST")
    base = f"http://{host}:{env_int('PORT')}"
    proxy = f"http://{host}:{env_int('CONTEXTSVC_PROXY_PORT')}/proxy"
    curl = (
        f"curl -H 'Authorization: Bearer {demo.key}' "
        f"'{base}/api/v1/sessions/{DEMO_SESSION}/context?format=anthropic'"
    )
    return "\n".join(
        [
            f"contextsvc is ready on {base}/  (API docs: {base}/api/v1/docs)",
            f"  proxy       {proxy}/anthropic  ·  {proxy}/openai/v1  ·  {proxy}/gemini",
            "  the docs' examples read the key from your shell:",
            f"  export CONTEXTSVC_KEY={demo.key}",
            f"  agent key   {demo.key}",
            f"  dashboard   {base}/  login: {demo.username} / {demo.password}",
            f"  try         {curl}",
        ]
    )
