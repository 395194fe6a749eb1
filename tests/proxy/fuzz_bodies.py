"""Hostile request bodies for the proxy fuzz: valid seeds per endpoint and their mutations.

A case is a seed (a body the proxy accepts) with one to four mutations at
paths drawn from the seed: a value swapped for one of another type, a key or
item deleted, a hostile string (NUL, a lone surrogate, 10,000 characters,
unicode), a huge integer, a deep nesting, an unknown key; then written as
JSON, sometimes with NaN / Infinity, invalid UTF-8 or cut short, or padded
past the body limit. Hypothesis draws from ``mutated``; the bulk cases
(``bulk_raw``) draw the same vocabulary from a seeded ``random.Random``.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import orjson
from hypothesis import strategies as st

MODEL_A = "claude-opus-4-5"
MODEL_O = "gpt-5.1"
SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "lines": {"type": "array", "items": {"type": "integer"}},
    },
    "required": ["path"],
}

ANTHROPIC = {
    "model": MODEL_A,
    "max_tokens": 256,
    "system": [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
    "tools": [{"name": "read_file", "description": "Read a file", "input_schema": SCHEMA}],
    "tool_choice": {"type": "auto"},
    "metadata": {"user_id": "u1"},
    "messages": [
        {"role": "user", "content": "read a.py"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "read_file",
                    "input": {"path": "a.py"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "print(1)"},
                {"type": "text", "text": "and now?"},
            ],
        },
    ],
}

CHAT = {
    "model": MODEL_O,
    "max_completion_tokens": 256,
    "tools": [
        {
            "type": "function",
            "function": {"name": "read_file", "description": "Read a file", "parameters": SCHEMA},
        }
    ],
    "tool_choice": "auto",
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": [{"type": "text", "text": "read a.py"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "print(1)"},
        {"role": "user", "content": "and now?", "name": "dev"},
    ],
}

RESPONSES = {
    "model": MODEL_O,
    "instructions": "You are terse.",
    "max_output_tokens": 256,
    "tools": [
        {"type": "function", "name": "read_file", "description": "Read", "parameters": SCHEMA}
    ],
    "metadata": {"run": "1"},
    "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "read a.py"}]},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "read_file",
            "arguments": '{"path": "a.py"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "print(1)"},
        {"role": "user", "content": "and now?"},
    ],
}


# The model is the URL's (``/proxy/gemini/v1beta/models/{model}:…``); calls carry no id.
GEMINI = {
    "systemInstruction": {"parts": [{"text": "You are terse."}]},
    "generationConfig": {"maxOutputTokens": 256, "temperature": 0.2},
    "tools": [
        {
            "functionDeclarations": [
                {"name": "read_file", "description": "Read a file", "parameters": SCHEMA}
            ]
        }
    ],
    "contents": [
        {"role": "user", "parts": [{"text": "read a.py"}]},
        {
            "role": "model",
            "parts": [{"functionCall": {"name": "read_file", "args": {"path": "a.py"}}}],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "read_file", "response": {"output": "print(1)"}}}
            ],
        },
        {"role": "user", "parts": [{"text": "and now?"}]},
    ],
}


def paths(value: Any, here: tuple = ()) -> list[tuple]:
    """The paths in ``value`` down to 8 levels (the root included), parents before children."""
    out = [here]
    if len(here) >= 8:
        return out
    if isinstance(value, dict):
        for key, item in value.items():
            out.extend(paths(item, (*here, key)))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out.extend(paths(item, (*here, i)))
    return out


def deep(levels: int, leaf: Any = 1) -> Any:
    value = leaf
    for i in range(levels):
        value = [value] if i % 2 else {"a": value}
    return value


HOSTILE_STRINGS = [
    "",
    "\x00",
    "a\x00b",
    "\ud800",
    "x\udfffy",
    "x" * 10_000,
    "n" * 201,
    "é🙂\u2028\u202e",
    "\ufeff",
    " ",
    "NaN",
    "null",
]
NUMBERS = [0, -1, 1, 2**31, 2**63, 2**64, -(2**70), 10**30]
FLOATS = [0.5, -1e308, 1e308, float("nan"), float("inf"), float("-inf")]
SHAPES = [
    [{}],
    [[]],
    {"type": "text"},
    {"type": "tool_use"},
    {"type": "tool_result"},
    {"role": "user"},
    {"type": "function_call"},
]
DEPTHS = [65, 200, 500]

HOSTILE_TEXT = st.sampled_from(HOSTILE_STRINGS)
ATOMS = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(NUMBERS),
    st.sampled_from(FLOATS),
    HOSTILE_TEXT,
    st.text(max_size=20),
)
VALUES = st.one_of(
    ATOMS,
    st.lists(ATOMS, max_size=3),
    st.dictionaries(st.one_of(HOSTILE_TEXT, st.text(max_size=8)), ATOMS, max_size=3),
    st.sampled_from(DEPTHS).map(deep),
    st.sampled_from(SHAPES),
)


def _apply(body: Any, path: tuple, op: str, value: Any) -> Any:
    if not path:
        return value if op == "set" else body
    parent = body
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    if op == "delete":
        del parent[last]
    elif op == "add" and isinstance(parent[last], dict):
        parent[last][str(value)[:50] if not isinstance(value, str) else value] = value
    elif op == "add" and isinstance(parent[last], list):
        parent[last].append(value)
    elif op == "add_key" and isinstance(parent, dict):
        parent[value if isinstance(value, str) else "x"] = 1
    else:
        parent[last] = value
    return body


@st.composite
def mutated(draw: Any, seed: dict[str, Any]) -> dict[str, Any]:
    body: Any = copy.deepcopy(seed)
    for _ in range(draw(st.integers(1, 4))):
        candidates = paths(body)
        path = draw(st.sampled_from(candidates))
        op = draw(st.sampled_from(["set", "set", "set", "delete", "add", "add_key"]))
        body = _apply(body, path, op, copy.deepcopy(draw(VALUES)))
        if not isinstance(body, (dict, list)):
            break
    return body


def encode(body: Any, how: str) -> bytes:
    """The body as bytes, written ``how``: json, compact, utf8 (surrogates as bytes), cut."""
    if how == "utf8":
        return json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
    raw = json.dumps(body).encode()
    if how == "cut":
        return raw[: max(1, len(raw) // 2)]
    if how == "nan":
        return raw.replace(b"256", b"NaN", 1).replace(b'"a.py"', b"Infinity", 1)
    return raw


HOW = ["json"] * 12 + ["utf8", "cut", "nan"]
ENCODINGS = st.sampled_from(HOW)


def padded(raw: bytes, limit: int, delta: int) -> bytes:
    """``raw`` grown by a string field to ``limit + delta`` bytes (past the limit, or just under)."""
    if not raw.endswith(b"}"):
        return raw
    return raw[:-1] + b', "pad": "' + b"p" * max(0, limit - len(raw) + delta) + b'"}'


# The bulk cases: the same vocabulary, drawn by a seeded ``random.Random``
# (a fraction of hypothesis's cost per body). Each case opens with a value
# swapped for one of another JSON type, so most are refusals, the gate's work.


def _text(rng: random.Random) -> str:
    return "".join(
        chr(rng.choice((rng.randrange(32, 127), rng.randrange(160, 0x3000))))
        for _ in range(rng.randrange(21))
    )


def _atom(rng: random.Random) -> Any:
    pool = rng.randrange(6)
    if pool == 0:
        return rng.choice([None, True, False])
    if pool == 1:
        return rng.choice(NUMBERS)
    if pool == 2:
        return rng.choice(FLOATS)
    if pool == 3:
        return _text(rng)
    return rng.choice(HOSTILE_STRINGS)


def _value(rng: random.Random) -> Any:
    kind = rng.randrange(10)
    if kind < 5:
        return _atom(rng)
    if kind == 5:
        return [_atom(rng) for _ in range(rng.randrange(4))]
    if kind == 6:
        return {
            rng.choice((_text(rng), *HOSTILE_STRINGS)): _atom(rng) for _ in range(rng.randrange(4))
        }
    if kind == 7:
        return deep(rng.choice(DEPTHS))
    return copy.deepcopy(rng.choice(SHAPES))


def _retyped(value: Any, rng: random.Random) -> Any:
    """A value of another JSON type than ``value``."""
    while True:
        other = _value(rng)
        if type(other) is not type(value):
            return other


# Free-form JSON (schemas, metadata, a tool call's input) takes any type: a value
# retyped there is forwarded, at ten times a refusal's cost, so the retyped value
# is drawn from the fields the gate types (the later mutations go anywhere).
FREE_FORM = {"input_schema", "parameters", "metadata", "cache_control", "args", "response"}


def typed(path: tuple) -> bool:
    """Whether ``path`` is a field the gate types (not inside free-form JSON)."""
    return not any(key in FREE_FORM or (key == "input" and i) for i, key in enumerate(path))


_PREPARED: dict[int, tuple[bytes, list[tuple]]] = {}


def _prepared(seed: dict[str, Any]) -> tuple[bytes, list[tuple]]:
    """``seed`` as JSON (a copy is parsed from it: faster than ``deepcopy``) and its typed paths."""
    if id(seed) not in _PREPARED:
        _PREPARED[id(seed)] = (orjson.dumps(seed), [p for p in paths(seed)[1:] if typed(p)])
    return _PREPARED[id(seed)]


def bulk_body(seed: dict[str, Any], rng: random.Random) -> Any:
    """``seed`` with a typed field retyped, then up to three of ``mutated``'s mutations."""
    raw, fields = _prepared(seed)
    body: Any = orjson.loads(raw)
    path = rng.choice(fields)
    parent = body
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = _retyped(parent[path[-1]], rng)
    for _ in range(rng.randrange(4)):
        op = rng.choice(["set", "set", "set", "delete", "add", "add_key"])
        body = _apply(body, rng.choice(paths(body)), op, _value(rng))
        if not isinstance(body, (dict, list)):
            break
    return body


def bulk_raw(seed: dict[str, Any], rng: random.Random, limit: int) -> bytes:
    """A bulk case as bytes: ``bulk_body`` written one of the ways ``encode`` knows, 1 in 41 padded."""
    raw = encode(bulk_body(seed, rng), rng.choice(HOW))
    if rng.randrange(41) == 0:
        raw = padded(raw, limit, rng.choice([-64, 1, 4096]))
    return raw
