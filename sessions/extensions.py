"""The one typed registry through which apps above ``sessions`` plug into it.

``sessions`` never imports the apps built on it (compaction, prompting); they
register built-in tools and hooks here from their ``AppConfig.ready()``, so
dependencies run one way and every extension point is listed in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from contextsvc.engine.messages import ToolDef

if TYPE_CHECKING:
    from .accounting import BudgetState
    from .models import Session, ToolOutput


@dataclass(frozen=True, slots=True)
class WindowEvent:
    """The live window changed after message ``after_seq``: it now starts at
    ``start_seq``, with ``tokens`` of preamble + kept messages (a snapshot).
    What a ``window_events`` hook returns, for the dashboard's usage chart (and the
    transcript listing's client-compaction markers, ``selectors_transcript``)."""

    after_seq: int
    start_seq: int
    tokens: int | None
    kind: str  # compaction / restore / CLIENT_COMPACTION
    # docs/concepts/compaction.md#sandwich-head: messages 1 … head_end_seq stayed live too (0:
    # none).
    head_end_seq: int = 0


# A client (through the proxy) compacted or edited its own history: the window restarted.
CLIENT_COMPACTION = "client compaction"


# Runs after a committed append or usage report; the last argument is the role
# of the last appended message, or "usage" (compaction's auto-trigger,
# docs/concepts/compaction.md#check-points).
AfterAppend = Callable[["Session", "BudgetState", str], None]
# Runs before a context is built at block or final; True when it changed the
# session (compaction compacts synchronously, docs/concepts/guard.md#block-compacts-first).
ContextPreflight = Callable[["Session", "BudgetState"], bool]
# A note for the built context, or None (compaction's 80 % note, docs/concepts/guard.md#usage-note).
ContextNote = Callable[["Session", "BudgetState"], "str | None"]
# Blocks merged into the budget (compaction: auto, circuit breaker).
BudgetBlock = Callable[["Session"], dict[str, Any]]
# Whether compaction can still make room; with none registered, the tool
# preflight (docs/concepts/guard.md#tool-preflight) applies (failure view, session final).
CompactionCheck = Callable[["Session"], bool]
# Given candidate outputs, the refs among them still referenced; GC never
# deletes one (compaction: snapshots).
ReferenceCheck = Callable[[Sequence["ToolOutput"]], Iterable[str]]
# Given the tools PUT registers (session row locked), the tool tokens that will
# be sent, or None to send everything (prompting's deferral,
# docs/concepts/deferral.md#deferral-threshold).
ToolDeferral = Callable[["Session", list[ToolDef]], "int | None"]
# Where the live window restarted, oldest first, for the dashboard's usage
# chart and the transcript's markers (compaction: its snapshots; the proxy:
# its client compactions).
WindowEvents = Callable[["Session"], list[WindowEvent]]
# A panel in the dashboard's session inspector: a template (a named partial)
# and its context (compaction: the Compact form and the run under way).
InspectorPanel = Callable[["Session"], tuple[str, dict[str, Any]]]
# Runs in the transaction that deletes a session, before its row is locked:
# compaction locks the session's runs first, in the order its apply takes them
# (run, then session), so a delete and a finishing run cannot deadlock.
BeforeDelete = Callable[["Session"], None]
# Runs after a committed change to the model profiles (prices, limits): prompting
# forgets the profiles it keeps per process, so this process's next build uses
# the change (docs/dashboard.md#models-and-prices).
ProfilesChanged = Callable[[], None]
# A built-in tool's handler: the session and the model's arguments → its result.
ToolHandler = Callable[["Session", dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class BuiltinTool:
    """A tool the service runs itself: its definition and its handler."""

    definition: ToolDef
    handler: ToolHandler


@dataclass(slots=True)
class Extensions:
    """Every hook list and built-in tool, in one place (the only way up from ``sessions``)."""

    after_append: list[AfterAppend] = field(default_factory=list)
    context_preflight: list[ContextPreflight] = field(default_factory=list)
    context_notes: list[ContextNote] = field(default_factory=list)
    budget_blocks: list[BudgetBlock] = field(default_factory=list)
    compaction_available: list[CompactionCheck] = field(default_factory=list)
    reference_checks: list[ReferenceCheck] = field(default_factory=list)
    tool_deferral: list[ToolDeferral] = field(default_factory=list)
    window_events: list[WindowEvents] = field(default_factory=list)
    inspector_panels: list[InspectorPanel] = field(default_factory=list)
    before_delete: list[BeforeDelete] = field(default_factory=list)
    profiles_changed: list[ProfilesChanged] = field(default_factory=list)
    tools: dict[str, BuiltinTool] = field(default_factory=dict)

    def register_tool(self, definition: ToolDef, handler: ToolHandler) -> None:
        self.tools[definition.name] = BuiltinTool(definition=definition, handler=handler)

    @staticmethod
    def add(hooks: list[Any], hook: Any) -> None:
        """Append once: ``ready()`` may run more than once (tests, reloads)."""
        if hook not in hooks:
            hooks.append(hook)


REGISTRY = Extensions()
