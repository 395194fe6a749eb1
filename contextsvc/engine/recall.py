"""Recall over the whole session: the name of the search tool and how the context points to it.

Everything a session ever held stays searchable: every stored tool output in
full, messages that left the window (compaction, retraction, trimming) and
the summaries that replaced them. The tool that searches it is a built-in
(registered by ``sessions``, run inside the proxy like the output cache
tools); summaries and trimmed views name it, so an agent whose context no
longer lists a ref still has a way in (docs/tool-output-cache.md, "Reaching what left
the context").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

SEARCH_TOOL_NAME = "history_search"

# One line a summary ends with: what the tool covers and how to call it.
SEARCH_HINT = (
    f"Everything earlier in this session stays searchable: {SEARCH_TOOL_NAME}"
    '(query="…") finds text in every tool output (in full), every earlier message '
    "and every earlier summary, with the seq, the tool, the ref and the line of each hit."
)

# The short form a trimmed view ends with (it is repeated per view, so it stays small).
SEARCH_HINT_SHORT = f"{SEARCH_TOOL_NAME} searches all earlier outputs and messages"


# Added to the summary instruction when the agent can call the search tool: the
# summary need not keep every ref, and must not write the note itself (it is
# added where the summary enters the context, ``recall.with_search_hint``).
SEARCH_PROMPT_NOTE = (
    f"Every earlier tool output and message stays searchable with {SEARCH_TOOL_NAME}, and a "
    "note naming it is added under the summary: keep the refs (ref=...) the next step needs, "
    "and do not write that note yourself."
)


def search_available(policy: Mapping[str, Any] | None) -> bool:
    """Whether a session's agent can call the search tool, from its policy.

    Off when the proxy does not run the service's built-ins for the model
    (``proxy.builtin_tools`` false: the model is never offered the tool) or
    when the output cache is disabled (nothing is stored to search). A summary
    or view then names no tool the agent cannot call: the index of what left
    stays (counts, seq ranges, paths), without the way in.
    """
    policy = policy or {}
    proxy = policy.get("proxy") or {}
    cache = policy.get("tool_output_cache") or {}
    return bool(proxy.get("builtin_tools", True)) and bool(cache.get("enabled", True))


def without_search_hint(text: str) -> str:
    """``text`` with every copy of ``SEARCH_HINT`` taken out (and the blank lines it leaves).

    An LLM summariser that re-reads the context sees the hint under the earlier
    summary and may copy it; a merged memory would then carry it once per part.
    """
    if SEARCH_HINT not in text:
        return text
    lines = [line for line in text.split("\n") if line.strip() != SEARCH_HINT]
    out = "\n".join(lines).replace(SEARCH_HINT, "")
    return re.sub(r"\n{3,}", "\n\n", out).strip("\n")


def with_search_hint(summary: str, search: bool = True) -> str:
    """The summary as it enters the context: its text, then ``SEARCH_HINT`` exactly once.

    Applied where the summary is placed (``summary_placement``, ``engine.build``),
    never asked of a summariser, so every summary has it whoever wrote it. A pure
    function of the stored text: the same summary renders the same bytes on every
    call, so the cached prefix does not move; idempotent, so a text that already
    went through it (or an LLM's copy of the hint) never gets a second one.
    ``search`` false (``search_available``): the text without any hint.
    """
    body = without_search_hint(summary)
    if not search or not body.strip():
        return body
    return f"{body}\n\n{SEARCH_HINT}"
