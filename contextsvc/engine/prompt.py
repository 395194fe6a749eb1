"""Prompt sections and cache breakpoints (docs/concepts/caching.md#prompt-builder).

The system prompt is assembled static → dynamic so that a provider's prefix
cache survives from one request to the next:

=====  ==========  =========  =================================
order  kind        cacheable  changes when
=====  ==========  =========  =================================
1      base        yes        never
2      rules       yes        on AGENT.md edit
3      memory      yes        on session start
4      skill       sometimes  on skill activate / deactivate
5      scratchpad  no         every turn, potentially
6      status      no         every turn
=====  ==========  =========  =================================

Providers cache *prefixes*, in the order tools → system → messages
(Anthropic). So:

- kinds base … scratchpad form the ``system`` prompt, in that order (stable
  within a kind: the agent's own order);
- ``status`` sections and the service's notes (usage %, the deferral note)
  form the *tail*: they are sent after the newest history block, i.e. after
  every breakpoint, so text that changes on every call never invalidates a
  cached prefix;
- breakpoints go after the leading run of cacheable system sections (after
  sections 1–3 too when cacheable skill sections follow, so activating a skill
  keeps base … memory cached), on the last tool definition when room is left,
  and one *moving* breakpoint on the newest history block (Anthropic's advice
  for multi-turn caching);
- never more than 4 (Anthropic's limit), and never on a prefix shorter than
  the model's minimum cacheable length (1,024–4,096 tokens): such a marker
  would be ignored by the provider and waste a slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from .errors import EngineValidationError
from .messages import PromptSection

SECTION_KINDS: tuple[str, ...] = ("base", "rules", "memory", "skill", "scratchpad", "status")
SECTION_ORDER: dict[str, int] = {kind: i for i, kind in enumerate(SECTION_KINDS)}
# Sections 1–3 (base, rules, memory): a breakpoint may follow them
# (docs/concepts/caching.md#breakpoints).
STATIC_KINDS: frozenset[str] = frozenset({"base", "rules", "memory"})
# Sent after every breakpoint (the tail), never inside a cached prefix.
TAIL_KINDS: frozenset[str] = frozenset({"status"})

# Anthropic: "You can define up to 4 cache breakpoints" per request.
MAX_BREAKPOINTS = 4
DEFAULT_MIN_CACHEABLE_TOKENS = 1024
CACHE_TTLS: tuple[str, ...] = ("5m", "1h")

BreakpointAt = Literal["tools", "system", "history"]


def check_kind(section: PromptSection, index: int | None = None) -> None:
    if section.kind not in SECTION_ORDER:
        where = f"sections[{index}] " if index is not None else ""
        raise EngineValidationError(
            f"Section {where}{section.name!r}: unknown kind {section.kind!r};"
            f" expected one of {', '.join(SECTION_KINDS)}",
            field=f"sections.{index}.kind" if index is not None else "kind",
        )


def order_sections(
    sections: Sequence[PromptSection], *, cacheable_first: bool = True
) -> list[PromptSection]:
    """docs/concepts/caching.md#section-order: base, rules, memory, skill, scratchpad, status.

    Within a kind, cacheable sections come before the others whatever order
    they were posted in (the PromptBuilder "places cacheable (static) sections
    first"), so one changing section does not cut its kind's static ones out of
    the cached prefix; otherwise the agent's order is kept (a stable sort).
    ``cacheable_first=False`` keeps the agent's order within a kind. An
    unknown kind is an error here, not a silent "last": the API rejects it
    before it is stored.
    """
    for i, section in enumerate(sections):
        check_kind(section, i)
    if cacheable_first:
        return sorted(sections, key=lambda s: (SECTION_ORDER[s.kind], not s.cacheable))
    return sorted(sections, key=lambda s: SECTION_ORDER[s.kind])


def split_sections(
    ordered: Sequence[PromptSection],
) -> tuple[list[PromptSection], list[PromptSection]]:
    """(system sections, tail sections) of an already ordered list; empty ones dropped."""
    system = [s for s in ordered if s.content and s.kind not in TAIL_KINDS]
    tail = [s for s in ordered if s.content and s.kind in TAIL_KINDS]
    return system, tail


def cacheable_run(system: Sequence[PromptSection]) -> int:
    """Length of the leading run of cacheable system sections.

    A breakpoint after a non-cacheable section would cache text that changes,
    so the cached prefix stops at the first section that is not cacheable.
    """
    n = 0
    for section in system:
        if not section.cacheable:
            break
        n += 1
    return n


@dataclass(frozen=True, slots=True)
class CachePlan:
    """Where the ``anthropic`` format puts ``cache_control`` markers.

    ``system`` holds indices into the system sections (as ``split_sections``
    returns them): the marker goes on that section's block. ``history`` marks
    the last content block of the newest history message. ``prefix_tokens``
    records the estimated prefix length at each marker, in the order
    tools, system…, history (for the budget and the tests).
    """

    tools: bool = False
    system: tuple[int, ...] = ()
    history: bool = False
    ttl: str = "5m"
    prefix_tokens: tuple[int, ...] = ()

    @property
    def count(self) -> int:
        return int(self.tools) + len(self.system) + int(self.history)

    def cache_control(self) -> dict[str, str]:
        # 5 minutes is the API default; only the 1-hour TTL needs spelling out.
        if self.ttl == "1h":
            return {"type": "ephemeral", "ttl": "1h"}
        return {"type": "ephemeral"}

    def to_dict(self) -> dict[str, object]:
        return {
            "tools": self.tools,
            "system": list(self.system),
            "history": self.history,
            "ttl": self.ttl,
            "count": self.count,
            "prefix_tokens": list(self.prefix_tokens),
        }


@dataclass(frozen=True, slots=True)
class PlanInput:
    """Token estimates the planner needs (from counts stored at ingest)."""

    tool_tokens: int = 0
    system_tokens: Sequence[int] = ()
    history_tokens: int = 0
    has_history: bool = False
    # Text after the history that changes per call (status sections, notes).
    has_tail: bool = False
    min_cacheable: int = DEFAULT_MIN_CACHEABLE_TOKENS
    max_breakpoints: int = MAX_BREAKPOINTS
    history_breakpoint: bool = True
    mark_tools: bool = True
    ttl: str = "5m"


def plan_breakpoints(system: Sequence[PromptSection], data: PlanInput) -> CachePlan:
    """Choose up to 4 breakpoints, most valuable first.

    Priority: the moving history breakpoint (it caches everything before the
    newest message, so the next call reads the whole conversation from cache),
    then the end of the cacheable system run, then the end of sections 1–3 when
    cacheable skills follow it, then the tools. Each candidate is kept only if
    its prefix (tools + system up to it [+ history]) reaches ``min_cacheable``.

    docs/concepts/caching.md#marker-before-change: a breakpoint goes only where a later part
    changes. The end of the system run and the tools are marked only when something that varies
    follows — a non-cacheable section, the history or the tail; a request
    that is all static (an entirely cacheable system prompt and nothing after
    it) gets no marker there.
    """
    if len(data.system_tokens) != len(system):
        raise EngineValidationError(
            "system_tokens must have one entry per system section", field="system_tokens"
        )
    if data.ttl not in CACHE_TTLS:
        raise EngineValidationError(
            f"cache ttl must be one of {', '.join(CACHE_TTLS)}", field="ttl"
        )
    limit = max(0, min(data.max_breakpoints, MAX_BREAKPOINTS))
    tools = max(0, data.tool_tokens)
    cumulative: list[int] = []
    running = tools
    for tokens in data.system_tokens:
        running += max(0, tokens)
        cumulative.append(running)
    system_total = running

    # (kind, index, prefix tokens) in priority order.
    candidates: list[tuple[BreakpointAt, int, int]] = []
    if data.history_breakpoint and data.has_history:
        candidates.append(("history", -1, system_total + max(0, data.history_tokens)))
    run = cacheable_run(system)
    varies_after = run < len(system) or data.has_history or data.has_tail
    if run and varies_after:
        candidates.append(("system", run - 1, cumulative[run - 1]))
    if run:
        # Cacheable skill sections after 1–3 change when a skill is (de)activated.
        static_end = max((i for i in range(run) if system[i].kind in STATIC_KINDS), default=None)
        if static_end is not None and static_end < run - 1:
            candidates.append(("system", static_end, cumulative[static_end]))
    if data.mark_tools and tools and varies_after:
        candidates.append(("tools", -1, tools))

    chosen = [c for c in candidates if c[2] >= max(1, data.min_cacheable)][:limit]
    system_marks = tuple(sorted(i for kind, i, _ in chosen if kind == "system"))
    marks_tools = any(kind == "tools" for kind, _, _ in chosen)
    marks_history = any(kind == "history" for kind, _, _ in chosen)
    prefixes: list[int] = []
    if marks_tools:
        prefixes.append(tools)
    prefixes.extend(cumulative[i] for i in system_marks)
    if marks_history:
        prefixes.extend(p for kind, _, p in chosen if kind == "history")
    return CachePlan(
        tools=marks_tools,
        system=system_marks,
        history=marks_history,
        ttl=data.ttl,
        prefix_tokens=tuple(prefixes),
    )


@dataclass(frozen=True, slots=True)
class BuiltPrompt:
    """docs/concepts/caching.md#prompt-builder ``Build() (prompt string, breakpoints []int)``.

    ``breakpoints`` are character offsets into ``prompt`` where a cacheable
    prefix ends (for providers that take a flat string); ``blocks`` are the
    same sections as (name, text, cacheable) for block-based providers.
    """

    prompt: str
    breakpoints: tuple[int, ...]
    blocks: tuple[tuple[str, str, bool], ...]


class PromptBuilder:
    """The builder of docs/concepts/caching.md#prompt-builder over sections, for callers that want
    one string."""

    separator = "\n\n"

    def __init__(self, sections: Sequence[PromptSection] = ()) -> None:
        self.sections: list[PromptSection] = list(sections)

    def add(self, section: PromptSection) -> PromptBuilder:
        self.sections.append(section)
        return self

    def build(self) -> BuiltPrompt:
        system, tail = split_sections(order_sections(self.sections))
        ordered = [*system, *tail]
        run = cacheable_run(system)
        static_end = max((i for i in range(run) if system[i].kind in STATIC_KINDS), default=None)
        # docs/concepts/caching.md#marker-before-change: a breakpoint only where a later part
        # changes — after the cacheable run when a non-cacheable section follows, after sections
        # 1–3 when cacheable skills (which come and go) follow; none in a prompt
        # that is cacheable to its end.
        marks = {run - 1} if run and run < len(ordered) else set()
        if static_end is not None and static_end < run - 1:
            marks.add(static_end)
        text_parts: list[str] = []
        breakpoints: list[int] = []
        offset = 0
        for i, section in enumerate(ordered):
            if text_parts:
                offset += len(self.separator)
            text_parts.append(section.content)
            offset += len(section.content)
            if i in marks:
                breakpoints.append(offset)
        return BuiltPrompt(
            prompt=self.separator.join(text_parts),
            breakpoints=tuple(breakpoints),
            blocks=tuple((s.name, s.content, s.cacheable) for s in ordered),
        )


def plain_concatenation(sections: Sequence[PromptSection], notes: Sequence[str] = ()) -> str:
    """docs/concepts/caching.md#degradation: when building fails, a plain concatenation.

    The agent's order, no sorting, no markers: nothing here can fail on input
    that made the builder fail.
    """
    parts = [str(getattr(s, "content", "") or "") for s in sections]
    parts.extend(str(n) for n in notes)
    return "\n\n".join(p for p in parts if p)
