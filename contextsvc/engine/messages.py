"""Plain message types shared by every engine module.

The engine never sees Django models: the Django layers convert rows into these
dataclasses (and back) at the boundary, so every formula here can be tested
without a database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

# ``system``: an instruction the client placed mid-conversation (Claude Code
# sends one after the first user turn). It stays at its position; the build
# sends it as a system message where the model accepts one, else as marked
# user text (``engine.build``).
Role = Literal["user", "assistant", "tool", "system"]

# How the in-context view of a message relates to what the agent posted.
ViewState = Literal["full", "cut", "trimmed", "offloaded", "cleared", "failed"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Message:
    """One transcript message as the engine sees it.

    ``content`` is either text or a list of provider-neutral parts
    (``{"type": "text", "text": ...}``, ``{"type": "image", ...}``); ``text``
    flattens it. ``view`` is what goes into the model's context when it differs
    from ``content`` (a cut or trimmed tool output); ``None`` means the content
    itself. ``seq`` and ``token_count`` are filled in by the store.
    """

    role: Role
    content: str | list[dict[str, Any]] = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    reasoning: str | None = None
    output_ref: str | None = None
    view: str | None = None
    view_state: ViewState = "full"
    seq: int | None = None
    token_count: int | None = None
    # Pinned by the agent: compaction keeps it verbatim above the summary.
    pinned: bool = False
    # What a build made of this message, by format (``providers.history.memo``):
    # the context cache hands the same objects to every build of a session, so
    # an unchanged message is rendered once, not once per call. Not an init
    # field: ``dataclasses.replace`` (a changed message) starts without it.
    rendered: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def text(self) -> str:
        return content_text(self.content)

    @property
    def context_text(self) -> str:
        """The text the model is shown: the view when there is one."""
        return self.view if self.view is not None else self.text

    @property
    def media_count(self) -> int:
        """Images, documents, audio, files: the parts counted at a flat figure each."""
        if isinstance(self.content, str):
            return 0
        return sum(1 for part in self.content if part.get("type", "text") not in TEXT_PARTS)

    @property
    def part_count(self) -> int:
        """Parts other than plain text (media, thinking, refusals …): something to send."""
        if isinstance(self.content, str):
            return 0
        return sum(1 for part in self.content if part.get("type", "text") != "text")

    @property
    def parts_text(self) -> str:
        """The text of the thinking and refusal parts (counted as text, not as media)."""
        if isinstance(self.content, str):
            return ""
        return "\n".join(
            str(part.get(key) or "")
            for part in self.content
            if part.get("type", "text") != "text" and (key := TEXT_PARTS.get(part.get("type")))
        )


# Part types that are not media, and the key of their text: thinking and
# refusals cost their text, not a media item; redacted thinking is opaque data.
TEXT_PARTS: dict[str, str | None] = {
    "text": "text",
    "thinking": "thinking",
    "redacted_thinking": None,
    "refusal": "refusal",
}


def content_text(content: str | list[dict[str, Any]] | None) -> str:
    """Flatten string-or-parts content to its text (media parts contribute nothing)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(
        str(part.get("text", "")) for part in content if part.get("type", "text") == "text"
    )


@dataclass(frozen=True, slots=True)
class PromptSection:
    """A named part of the system prompt (docs/concepts/caching.md#breakpoints)."""

    name: str
    content: str
    cacheable: bool = True
    kind: str = "base"  # base, rules, memory, skill, scratchpad, status


@dataclass(frozen=True, slots=True)
class ToolDef:
    """A tool definition as the agent registered it."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    category: str = "builtin"  # builtin, mcp, skill, client
    # Keywords ``tool_search`` matches besides the name and description
    # (docs/concepts/deferral.md#tool-search); never sent to the model.
    search_hint: str = ""
