"""The Messages API's limit on cache markers, kept when the client's markers join ours.

The API takes at most 4 ``cache_control`` markers per request. The proxy
drops the client's markers inside ``system``, ``messages`` and ``tools`` and
places its own (``engine.prompt``); a marker the client sets at the top level
(automatic caching) still counts. ``cap_breakpoints`` keeps the total at 4 by
removing ours from the front of the prompt (tools, then system): the newest
history marker, which moves with the conversation, is the one that pays.
"""

from __future__ import annotations

from typing import Any

from contextsvc.engine.prompt import MAX_BREAKPOINTS


def _marked(block: Any) -> bool:
    return isinstance(block, dict) and "cache_control" in block


def cap_breakpoints(body: dict[str, Any], limit: int = MAX_BREAKPOINTS) -> dict[str, Any]:
    """``body`` with at most ``limit`` cache markers, ours removed from the front first.

    The build marks at most one message block (the newest history turn,
    ``engine.build``), so when the tools, the system and that one marker fit,
    the history is not walked: the common call costs nothing per message. A
    marker is removed by replacing its block with a copy without it, in a copy of
    its turn: history blocks and turns are shared with other builds
    (``engine.providers.history``, ``engine.history_memo``).
    """
    ours: list[tuple[list[Any], int]] = []
    tools = body.get("tools")
    if isinstance(tools, list):
        ours.extend((tools, i) for i, t in enumerate(tools) if _marked(t))
    system = body.get("system")
    if isinstance(system, list):
        ours.extend((system, i) for i, b in enumerate(system) if _marked(b))
    top = 1 if "cache_control" in body else 0
    if len(ours) + 1 + top <= limit:
        return body
    messages = body.get("messages") or []
    for n, message in enumerate(messages):
        content = message.get("content")
        if isinstance(content, list) and any(_marked(b) for b in content):
            # The turn may be another build's too (``engine.history_memo``): a copy.
            content = list(content)
            messages[n] = {**message, "content": content}
            ours.extend((content, i) for i, b in enumerate(content) if _marked(b))
    total = len(ours) + top
    for blocks, i in ours[: max(0, total - limit)]:
        blocks[i] = {k: v for k, v in blocks[i].items() if k != "cache_control"}
    return body
