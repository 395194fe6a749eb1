"""The inputs of bench_context_cache.py: a catalogue of synthetic MCP tools (as
many servers' schemas as a heavy agent set-up carries), the built-in tools, and
histories cut from the recorded agent runs (../shared/workloads)."""

from __future__ import annotations

import json
import random

from common import WORKLOADS

REPLAY_RUNS = (
    "mini-swe-agent/marshmallow-code__marshmallow-1343__deepseek_lite_dev.jsonl",
    "mini-swe-agent/sqlfluff__sqlfluff-1733__deepseek_lite_dev_noparallel.jsonl",
)


# --- synthetic MCP servers --------------------------------------------------------------------

SERVERS = {
    "github": [
        "issue",
        "pull request",
        "repository",
        "branch",
        "commit",
        "release",
        "workflow run",
    ],
    "jira": ["ticket", "sprint", "epic", "board", "comment", "worklog"],
    "slack": ["channel", "message", "thread", "user", "reaction", "reminder"],
    "xcode": ["build", "scheme", "simulator", "test plan", "archive", "provisioning profile"],
    "kubernetes": ["pod", "deployment", "service", "namespace", "config map", "secret"],
    "aws": ["s3 bucket", "lambda function", "ec2 instance", "cloudwatch alarm", "iam role"],
    "postgres": ["table", "index", "query plan", "schema", "replication slot"],
    "figma": ["frame", "component", "style", "comment", "prototype"],
    "notion": ["page", "database", "block", "property"],
    "sentry": ["issue", "event", "release", "alert rule", "project"],
    "linear": ["issue", "cycle", "project", "team", "label"],
    "docker": ["container", "image", "volume", "network", "compose stack"],
    "gcal": ["event", "calendar", "attendee", "free busy slot"],
    "stripe": ["customer", "invoice", "subscription", "payment intent", "refund"],
}
VERBS = ["create", "list", "get", "update", "delete", "search", "run", "export"]
FILLER = (
    "The call is idempotent when an idempotency key is given. Results are paginated with an "
    "opaque cursor; pass the returned next_cursor to fetch the following page. Errors follow "
    "the server's JSON error format with a machine-readable code and a human message. "
    "Timestamps are ISO 8601 in UTC. Rate limits apply per token; on HTTP 429 wait for the "
    "number of seconds in Retry-After before trying again."
)


def make_tools(n: int = 300) -> list[dict]:
    rng = random.Random(6)
    combos = [(s, o, v) for s, objs in SERVERS.items() for o in objs for v in VERBS]
    rng.shuffle(combos)
    tools = []
    for server, obj, verb in combos[:n]:
        name = f"mcp__{server}__{verb}_{obj.replace(' ', '_')}"
        props = {}
        for j in range(rng.randint(4, 7)):
            field = rng.choice(
                [
                    "id",
                    "name",
                    "owner",
                    "status",
                    "labels",
                    "limit",
                    "cursor",
                    "query",
                    "region",
                    "project",
                    "assignee",
                    "priority",
                    "since",
                    "until",
                    "format",
                    "dry_run",
                    "timeout",
                    "tags",
                    "filter",
                    "sort",
                ]
            )
            props[f"{field}_{j}"] = {
                "type": rng.choice(["string", "integer", "boolean"]),
                "description": f"The {field.replace('_', ' ')} of the {obj} to {verb} on {server}. "
                + FILLER[: rng.randint(100, 260)],
            }
        tools.append(
            {
                "name": name,
                "description": f"{verb.capitalize()} a {obj} in {server}. " + FILLER,
                "input_schema": {
                    "type": "object",
                    "properties": props,
                    "required": [next(iter(props))],
                },
                "category": "mcp",
            }
        )
    return tools


BUILTINS = [
    {
        "name": "bash",
        "description": "Run a shell command in the workspace and return its output.",
        "input_schema": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
        "category": "builtin",
    },
    {
        "name": "read_file",
        "description": "Read a file of the workspace, numbered lines.",
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "offset": {"type": "integer"},
                "limit": {"type": "integer"},
            },
            "required": ["path"],
        },
        "category": "builtin",
    },
    {
        "name": "edit_file",
        "description": "Replace an exact string in a file of the workspace.",
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "old": {"type": "string"},
                "new": {"type": "string"},
            },
            "required": ["path", "old", "new"],
        },
        "category": "builtin",
    },
]


# --- recorded trajectories --------------------------------------------------------------------


def load_run(relative: str) -> tuple[str, list[dict]]:
    system, messages = "", []
    for line in (WORKLOADS / relative).read_text().splitlines():
        row = json.loads(line)
        if row["role"] == "system":
            system = row.get("content") or ""
            continue
        msg = {"role": row["role"], "content": row.get("content") or ""}
        if row.get("tool_calls"):
            msg["tool_calls"] = [
                {"id": c["id"], "name": c["name"], "arguments": c.get("arguments") or {}}
                for c in row["tool_calls"]
            ]
        if row["role"] == "tool":
            msg["tool_call_id"] = row["tool_call_id"]
        messages.append(msg)
    return system, messages


def uniquify(messages: list[dict], prefix: str) -> list[dict]:
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "id": f"{prefix}{c['id']}"} for c in m["tool_calls"]]
        if m.get("tool_call_id"):
            m["tool_call_id"] = f"{prefix}{m['tool_call_id']}"
        out.append(m)
    return out


def drop_unanswered(messages: list[dict]) -> list[dict]:
    """A final call (submit) may have no result; the store refuses a dangling call later on."""
    answered = {m["tool_call_id"] for m in messages if m["role"] == "tool"}
    out = []
    for m in messages:
        if m.get("tool_calls"):
            calls = [c for c in m["tool_calls"] if c["id"] in answered]
            m = (
                {**m, "tool_calls": calls}
                if calls
                else {k: v for k, v in m.items() if k != "tool_calls"}
            )
        out.append(m)
    return out


def history_messages(n: int) -> list[dict]:
    runs = sorted(WORKLOADS.glob("*/*.jsonl"))
    out: list[dict] = []
    cycle = 0
    while len(out) < n:
        for path in runs:
            _, messages = load_run(str(path.relative_to(WORKLOADS)))
            for m in drop_unanswered(uniquify(messages, f"c{cycle}_{path.stem[:12]}_")):
                if isinstance(m["content"], str) and len(m["content"]) > 1500:
                    m["content"] = m["content"][:1500]
                out.append(m)
            cycle += 1
            if len(out) >= n:
                break
    # Cut before the first user message at or after n: no call loses its result.
    cut = next((i for i in range(n, len(out)) if out[i]["role"] == "user"), len(out))
    return out[:cut]


def replay_session() -> tuple[str, list[dict]]:
    """~200 tool calls: one recorded run, continued by a second task (a new user turn)."""
    system, first = load_run(REPLAY_RUNS[0])
    _, second = load_run(REPLAY_RUNS[1])
    messages = drop_unanswered(uniquify(first, "a_")) + drop_unanswered(uniquify(second, "b_"))
    calls = 0
    for i, m in enumerate(messages):
        calls += len(m.get("tool_calls") or [])
        if calls >= 200 and m["role"] == "tool":
            return system, messages[: i + 1]
    return system, messages
