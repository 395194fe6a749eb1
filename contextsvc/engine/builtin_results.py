"""A built-in tool's result in the transcript: what ref it points into, and its view.

A result of ``tool_output_cache`` / ``tool_output_cache_grep`` is a page of a
stored output: it is kept in its message (not stored as a new output with a
new ref, so a grep of a grep cannot happen and refs do not multiply) and the
message points at the ref that was read. Like any other result it goes into
context cut when large, within the session's view limits.
"""

from __future__ import annotations

import json

from .output_views import GREP_TOOL, READ_TOOL, View, ViewConfig, utf8_prefix

# Of a cut result's room, the share its head takes; the tail keeps the rest
# (a page's continuation — has_more, next_offset — is at its end).
HEAD_SHARE = 0.75
# Bytes per token when a view's token cap becomes a byte limit (ceil(chars / 4),
# docs/concepts/context-build.md#token-estimate).
_BYTES_PER_TOKEN = 4


def ref_read(tool_name: str, text: str) -> str | None:
    """The ref a read / grep result came from (its ``ref_id``); None for other tools and errors."""
    if tool_name not in (READ_TOOL, GREP_TOOL):
        return None
    try:
        result = json.loads(text)
    except (ValueError, RecursionError):
        return None
    ref = result.get("ref_id") if isinstance(result, dict) else None
    return ref if isinstance(ref, str) and ref else None


def result_limit(config: ViewConfig) -> int:
    """The most bytes a built-in result's view takes: the message cap, and the view's token cap."""
    limit = config.max_message_bytes
    if config.view_tokens is not None:
        limit = min(limit, _BYTES_PER_TOKEN * config.view_tokens)
    return limit


def _notice(tool_name: str, ref: str | None, omitted: int, size: int) -> str:
    source = f"It read ref={ref}: " if ref else ""
    return (
        f"[… {omitted:,} characters of this {tool_name or 'tool'} result left out "
        f"({size:,} bytes in all, over the view's limit). {source}ask for less at a time "
        f"(a smaller limit or max_matches, a later offset or start_line) to see the rest. …]"
    )


def builtin_result_view(text: str, tool_name: str, ref: str | None, config: ViewConfig) -> View:
    """The view of a built-in's result: whole when it fits, else its head and tail around a notice.

    Cut by bytes, not by line: a result is one line of JSON more often than not,
    and ``max_line_length`` would leave only its first characters.
    """
    size = len(text.encode("utf-8"))
    limit = result_limit(config)
    if not config.enabled or size <= limit:
        return View(text=None, state="full")
    room = max(0, limit - len(_notice(tool_name, ref, size, size).encode("utf-8")) - 2)
    head = utf8_prefix(text, int(room * HEAD_SHARE))
    tail_bytes = room - len(head.encode("utf-8"))
    tail = text.encode("utf-8")[size - tail_bytes :].decode("utf-8", errors="ignore")
    if len(head) + len(tail) >= len(text):
        tail = ""
    omitted = len(text) - len(head) - len(tail)
    return View(
        text=f"{head}\n{_notice(tool_name, ref, omitted, size)}\n{tail}".rstrip("\n"),
        state="cut",
        lines_shown=head.count("\n") + tail.count("\n") + 1,
    )
