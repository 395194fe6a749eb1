"""What a client's request carried beside what the proxy sent for it (docs/proxy.md#what-changed).

The call record keeps no copy of the client's request: its new messages are
already in the transcript, and its system prompt and tools are kept as
digests. What this module gives is the account of the differences, computed
from the two bodies once the call's first byte has gone out:

- ``fields``: each top-level field passed through untouched, replaced by the
  managed context (``system``, ``messages``, ``tools`` …), dropped or added;
- ``tools``: the client's tool names beside the sent ones — added (the
  service's own tools), deferred (held back for ``tool_search``) or removed
  (a final turn sends the final-report tool alone);
- ``cache``: where the client put ``cache_control`` markers and where the
  sent body has them (the proxy places its own);
- ``synthetic``: what the sent history holds that nobody wrote — results for
  calls that got none, and the user line a request must start with.

Every function is pure and none is on a call's path to its first byte. None
reads the whole history either: cache markers are looked for on the messages
the caller names (the newest), and missing results only when the transcript
has a call left unanswered.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .wellformed import (
    EMPTY_AFTER_SUMMARY_TEXT,
    EMPTY_HISTORY_TEXT,
    LEADING_USER_TEXT,
    NO_RESULT_TEXT,
)

# The fields a provider dialect's managed context replaces in the request.
# The fields the managed context replaces, in every dialect (Gemini's too: comparing a
# long ``contents`` with the client's, item by item, only to call it replaced, costs
# milliseconds per call).
MANAGED_FIELDS = frozenset(
    {
        "system",
        "messages",
        "tools",
        "input",
        "instructions",
        "contents",
        "systemInstruction",
        "system_instruction",
    }
)
_LEADING = frozenset({LEADING_USER_TEXT, EMPTY_HISTORY_TEXT, EMPTY_AFTER_SUMMARY_TEXT})


def digest(value: Any) -> str:
    """A short, stable digest of a JSON value (key order does not count)."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def field_changes(client: Mapping[str, Any], sent: Mapping[str, Any]) -> dict[str, list[str]]:
    """Top-level fields: ``passed`` (as sent by the client), ``replaced`` (the managed
    context, or a value the proxy changed), ``dropped`` and ``added``."""
    out: dict[str, list[str]] = {"passed": [], "replaced": [], "dropped": [], "added": []}
    for name, value in client.items():
        if name not in sent:
            out["dropped"].append(name)
        elif name in MANAGED_FIELDS:
            out["replaced"].append(name)
        elif sent[name] is value or sent[name] == value:
            out["passed"].append(name)
        else:
            out["replaced"].append(name)
    out["added"] = [name for name in sent if name not in client]
    return out


def tool_names(tools: Iterable[Any]) -> list[str]:
    """The names of a body's tools (any dialect; server tools by their ``type``)."""
    names = []
    for tool in tools:
        if not isinstance(tool, Mapping):
            continue
        function = tool.get("function")
        name = tool.get("name") or (function.get("name") if isinstance(function, Mapping) else "")
        names.append(str(name or tool.get("type") or ""))
    return names


def tool_changes(
    client: Sequence[str], sent: Sequence[str], *, final: bool
) -> dict[str, list[str]]:
    """The client's tools beside the sent ones. A client tool not sent was deferred
    (``tool_search`` finds it), or removed on a final turn."""
    sent_set, client_set = set(sent), set(client)
    missing = [name for name in client if name not in sent_set]
    return {
        "added": [name for name in sent if name not in client_set],
        "deferred": [] if final else missing,
        "removed": missing if final else [],
    }


def _marked(value: Any) -> bool:
    return isinstance(value, Mapping) and "cache_control" in value


def cache_marks(body: Mapping[str, Any], *, first: int = 0) -> list[str]:
    """Where ``body`` carries ``cache_control`` markers: ``top``, ``tools[i]``,
    ``system[i]``, ``messages[i]`` (a message once, whichever of its blocks).

    Only messages from index ``first`` on are looked at: the markers that move
    sit on the newest messages, and a caller that knows which messages it
    already saw passes where they end, so the work does not grow with the
    history (module doc)."""
    marks = ["top"] if "cache_control" in body else []
    tools = body.get("tools")
    if isinstance(tools, list):
        marks.extend(f"tools[{i}]" for i, tool in enumerate(tools) if _marked(tool))
    system = body.get("system")
    if isinstance(system, list):
        marks.extend(f"system[{i}]" for i, block in enumerate(system) if _marked(block))
    messages = body.get("messages")
    if isinstance(messages, list):
        for i, message in enumerate(messages[first:], start=first):
            content = message.get("content") if isinstance(message, Mapping) else None
            if isinstance(content, list) and any(_marked(block) for block in content):
                marks.append(f"messages[{i}]")
    return marks


def _texts(content: Any) -> Iterable[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, Mapping):
                inner = block.get("text", block.get("content", block.get("output")))
                if isinstance(inner, str):
                    yield inner
                elif isinstance(inner, list):
                    yield from _texts(inner)


def synthetic(messages: Sequence[Any], *, open_calls: bool = True) -> dict[str, int]:
    """What the sent history holds that nobody wrote (``engine.wellformed``):
    ``results``, answers to calls that got none, and ``user_lines``, the user
    turn a request starts with. ``open_calls`` False (the transcript has no
    call left unanswered) means no result can be missing: the history is
    not read for them."""
    results = lines = 0
    first = messages[0] if messages else None
    if isinstance(first, Mapping):
        lines = sum(1 for text in _texts(first.get("content")) if text in _LEADING)
    for message in messages if open_calls else ():
        if isinstance(message, Mapping):
            content = message.get("content", message.get("output"))
            results += sum(1 for text in _texts(content) if text == NO_RESULT_TEXT)
    return {"results": results, "user_lines": lines}
