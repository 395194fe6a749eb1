"""Tool-description deferral and ``tool_search`` (docs/concepts/deferral.md#tool-search).

When the registered tools' descriptions exceed ``tool_deferral_threshold``
(default 0.10) of the effective window, the least useful ones are held back:

1. built-in tools (the service's own) — never deferred;
2. MCP tools — deferred first (largest schemas, external);
3. skill tools — deferred second;
4. the client's own tools (category ``client``: Bash, Read, … sent through the
   proxy) — deferred last, the agent reaches for them on most turns;
5. within a category, least recently used first (tools never used count as
   oldest; among those, the ones the agent listed last go first).

The context then carries a ``tool_search`` tool and the note
``[N tools deferred to save context. Use tool_search to find them.]``,
followed (style ``list``, the default) by a ``## Available Tools`` listing of
each deferred tool's name and the first sentence of its description;
``tool_search`` ranks the deferred tools against a query (``engine.tool_index``)
and the matches are sent again for the rest of the turn.

Token figures are in the budget's unit for tool descriptions: the sum of the
per-tool estimates scaled ×2.09 (docs/concepts/context-build.md#tool-schema-scale), so
``tokens_sent`` is exactly what the budget's ``tool_descriptions`` shows.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from .budget import floor_ratio
from .errors import EngineValidationError
from .messages import ToolDef

DEFAULT_DEFERRAL_THRESHOLD = 0.10
# Deferred first → deferred last; anything else (builtin) is never deferred.
DEFER_ORDER: tuple[str, ...] = ("mcp", "skill", "client")

TOOL_SEARCH_NAME = "tool_search"
TOOL_SEARCH = ToolDef(
    name=TOOL_SEARCH_NAME,
    description=(
        "Search the tools that were deferred to save context. Give a few keywords for what "
        "you need to do (e.g. 'xcode build', 'create github issue'); the best matches are "
        "returned with their full input schemas and become callable for the rest of this "
        "turn. Use 'select:name1,name2' to load tools by exact name."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "Keywords describing the capability, or select:<tool names>",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 20,
                "default": 5,
                "description": "How many tools to return (default 5)",
            },
        },
        "required": ["query"],
    },
    category="builtin",
)

DEFERRAL_NOTE = "[{n} tools deferred to save context. Use tool_search to find them.]"
# Discoverability (docs/concepts/deferral.md#available-tools, as Claude Code lists its deferred
# tools): the note names each deferred tool with the first sentence of its description,
# under this heading, so the model knows what to search for.
AVAILABLE_TOOLS_HEADING = "## Available Tools"
NOTE_STYLES: tuple[str, ...] = ("list", "count")
DEFAULT_NOTE_STYLE = "list"
# A first sentence longer than this is cut (with "…"): the listing is resent
# on every call, after the cache breakpoints.
FIRST_SENTENCE_MAX_CHARS = 200
_SENTENCE_END = re.compile(r"(?<=[.!?])\s|\n")


def first_sentence(text: str, max_chars: int = FIRST_SENTENCE_MAX_CHARS) -> str:
    """The description's first sentence (up to ``. `` / ``! `` / ``? `` or a line break)."""
    text = (text or "").strip()
    match = _SENTENCE_END.search(text)
    sentence = (text[: match.start()] if match else text).strip()
    if len(sentence) > max_chars:
        sentence = sentence[: max_chars - 1].rstrip() + "…"
    return sentence


def deferral_note(deferred: Sequence[ToolDef], *, style: str = DEFAULT_NOTE_STYLE) -> str | None:
    """The note sent while tools are deferred; None when none are.

    ``count`` is the one-line note (docs/concepts/deferral.md#deferral-note); ``list`` adds the ``##
    Available Tools`` listing, one ``- name: first sentence`` line per deferred tool.
    """
    if style not in NOTE_STYLES:
        raise EngineValidationError(
            f"tool_deferral_note must be one of {', '.join(NOTE_STYLES)}",
            field="tool_deferral_note",
        )
    if not deferred:
        return None
    head = DEFERRAL_NOTE.format(n=len(deferred))
    if style == "count":
        return head
    return "\n".join([head, "", AVAILABLE_TOOLS_HEADING, *(listing_line(t) for t in deferred)])


def listing_line(tool: ToolDef) -> str:
    return _listing_line(tool.name, tool.description)


@lru_cache(maxsize=8192)
def _listing_line(name: str, description: str) -> str:
    # Every build lists the same few hundred deferred tools: each line is made once.
    sentence = first_sentence(description)
    return f"- {name}: {sentence}" if sentence else f"- {name}"


def listing_tokens(tool: ToolDef | None, style: str) -> int:
    """Tokens the ``list`` note spends on one deferred tool (``None``: the note's head).

    Estimated as ``ceil(chars / 4)`` (docs/concepts/context-build.md#token-estimate) plus one for
    the line break: the listing replaces the tool's schema, so deferring a tool saves its
    schema less this.
    """
    if style != "list":
        return 0
    if tool is None:
        head = DEFERRAL_NOTE.format(n=1000) + "\n\n" + AVAILABLE_TOOLS_HEADING
        return math.ceil(len(head) / 4) + 1
    return math.ceil(len(listing_line(tool)) / 4) + 1


def scaled(tokens: int, scale: float) -> int:
    """``ceil(tokens × scale)`` exactly, as ``tokens.estimate_tool_schemas`` does."""
    if not scale > 0:
        raise EngineValidationError("tool_schema_scale must be positive", field="tool_schema_scale")
    return math.ceil(tokens * Fraction(str(scale)))


def deferral_limit(effective_window: int, threshold: float) -> int:
    """docs/concepts/deferral.md#deferral-threshold: the tool-description budget, ``threshold ×
    effective window``."""
    number = isinstance(threshold, int | float) and not isinstance(threshold, bool)
    if not number or not 0 < threshold <= 1:
        raise EngineValidationError(
            f"tool_deferral_threshold must be in (0, 1], got {threshold!r}",
            field="tool_deferral_threshold",
        )
    return floor_ratio(threshold, effective_window)


def counted(tool_tokens: Mapping[str, int], uncounted: Collection[str]) -> Mapping[str, int]:
    """``tool_tokens`` with the uncounted tools at 0 (docs/concepts/guard.md#report-tools: the
    final-report and task-status tools are the agent's own machinery, not schema tokens)."""
    if not uncounted:
        return tool_tokens
    return {**tool_tokens, **{name: 0 for name in uncounted if name in tool_tokens}}


def _tokens(tool_tokens: Mapping[str, int], name: str) -> int:
    try:
        return int(tool_tokens[name])
    except KeyError:
        raise EngineValidationError(f"No token count for tool {name!r}", field="tools") from None


def choose_deferred(
    tools: Sequence[ToolDef],
    tool_tokens: Mapping[str, int],
    last_used: Mapping[str, int],
    *,
    limit_tokens: int,
    scale: float = 2.09,
    search_tool_tokens: int = 0,
    note_style: str = DEFAULT_NOTE_STYLE,
    uncounted: Collection[str] = (),
) -> list[str]:
    """docs/concepts/deferral.md#deferral-order: the names to hold back, in deferral order.

    Nothing is deferred while all descriptions fit in ``limit_tokens``. Once
    they do not, tools are deferred one by one in priority order until what is
    left — plus the ``tool_search`` tool that replaces them and the note's
    listing of them — fits (or nothing deferrable is left: built-ins alone may
    exceed the budget). ``uncounted`` tools cost nothing (``counted``).
    """
    tool_tokens = counted(tool_tokens, uncounted)
    total = sum(_tokens(tool_tokens, t.name) for t in tools)
    if scaled(total, scale) <= limit_tokens:
        return []
    index = {t.name: i for i, t in enumerate(tools)}
    candidates: list[ToolDef] = []
    for category in DEFER_ORDER:
        group = [t for t in tools if t.category == category and t.name != TOOL_SEARCH_NAME]
        # Least recently used first; never used = 0 = oldest; ties: listed last goes first.
        group.sort(key=lambda t: (int(last_used.get(t.name, 0)), -index[t.name]))
        candidates.extend(group)
    has_search = TOOL_SEARCH_NAME in index
    remaining = total + (0 if has_search else search_tool_tokens)
    remaining += listing_tokens(None, note_style)
    deferred: list[str] = []
    for tool in candidates:
        if scaled(remaining, scale) <= limit_tokens:
            break
        deferred.append(tool.name)
        remaining += listing_tokens(tool, note_style) - _tokens(tool_tokens, tool.name)
    return deferred


@dataclass(frozen=True, slots=True)
class Selection:
    """What is sent this call and what is held back."""

    active: tuple[ToolDef, ...]
    deferred: tuple[str, ...]  # held back and not loaded this turn, first deferred first
    loaded: tuple[str, ...]  # deferred, but promoted for the rest of the turn
    tokens_all: int  # scaled: every registered tool, as if nothing were deferred
    tokens_sent: int  # scaled: the active list, tool_search included
    search_tool_added: bool
    # The still-deferred tools' definitions (the note lists them) and the note's style.
    deferred_tools: tuple[ToolDef, ...] = ()
    note_style: str = DEFAULT_NOTE_STYLE

    @property
    def tokens_saved(self) -> int:
        return max(0, self.tokens_all - self.tokens_sent)

    @property
    def note(self) -> str | None:
        if not self.deferred:
            return None
        tools = self.deferred_tools or tuple(ToolDef(name=n) for n in self.deferred)
        return deferral_note(tools, style=self.note_style)

    @property
    def active_names(self) -> list[str]:
        return [t.name for t in self.active]


def assemble(
    tools: Sequence[ToolDef],
    tool_tokens: Mapping[str, int],
    deferred: Iterable[str],
    promoted: Iterable[str] = (),
    *,
    scale: float = 2.09,
    search_tool: ToolDef = TOOL_SEARCH,
    search_tool_tokens: int = 0,
    note_style: str = DEFAULT_NOTE_STYLE,
    uncounted: Collection[str] = (),
) -> Selection:
    """The tool list to send: kept tools in the agent's order, then
    ``tool_search`` (when anything is deferred), then the promoted tools in the
    order they were loaded. The order is deterministic so that the same state
    gives a byte-identical prefix. ``uncounted`` tools are sent but cost nothing."""
    tool_tokens = counted(tool_tokens, uncounted)
    by_name = {t.name: t for t in tools}
    # Deferral order (first deferred first), as choose_deferred returned it.
    deferred_list = [n for n in dict.fromkeys(deferred) if n in by_name]
    deferred_set = set(deferred_list)
    promoted_list: list[str] = []
    for name in promoted:
        if name in deferred_set and name not in promoted_list:
            promoted_list.append(name)
    active = [t for t in tools if t.name not in deferred_set]
    added = False
    if deferred_set and search_tool.name not in by_name:
        active.append(search_tool)
        added = True
    active.extend(by_name[n] for n in promoted_list)
    total = sum(_tokens(tool_tokens, t.name) for t in tools)
    sent = sum(_tokens(tool_tokens, t.name) for t in active if t.name in by_name)
    if added:
        sent += search_tool_tokens
    still_deferred = tuple(n for n in deferred_list if n not in promoted_list)
    if still_deferred and note_style == "list":
        # The note's listing stands in for the deferred schemas: counted with them.
        sent += listing_tokens(None, note_style)
        sent += sum(listing_tokens(by_name[n], note_style) for n in still_deferred)
    return Selection(
        active=tuple(active),
        deferred=still_deferred,
        loaded=tuple(promoted_list),
        tokens_all=scaled(total, scale),
        tokens_sent=scaled(sent, scale),
        search_tool_added=added,
        deferred_tools=tuple(by_name[n] for n in still_deferred),
        note_style=note_style,
    )
