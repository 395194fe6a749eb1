"""Recall over the whole session: the name of the search tool and how the context points to it.

Everything a session ever held stays searchable: every stored tool output in
full, messages that left the window (compaction, retraction, trimming) and
the summaries that replaced them. The tool that searches it is a built-in
(registered by ``sessions``, run inside the proxy like the output cache
tools); summaries and trimmed views name it, so an agent whose context no
longer lists a ref still has a way in (docs: concepts, "Reaching what left
the context").
"""

from __future__ import annotations

SEARCH_TOOL_NAME = "history_search"

# One line a summary ends with: what the tool covers and how to call it.
SEARCH_HINT = (
    f"Everything earlier in this session stays searchable: {SEARCH_TOOL_NAME}"
    '(query="…") finds text in every tool output (in full), every earlier message '
    "and every earlier summary, with the seq, the tool, the ref and the line of each hit."
)

# The short form a trimmed view ends with (it is repeated per view, so it stays small).
SEARCH_HINT_SHORT = f"{SEARCH_TOOL_NAME} searches all earlier outputs and messages"
