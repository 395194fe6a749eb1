"""The inspector's timeline: a page of messages grouped by turn, tool calls paired with results.

A page reads a fixed number of rows whatever the session's size, and long
texts are cut in the database (``Substr``) so a page of 50 KB tool outputs
does not ship megabytes to Python.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import QuerySet
from django.db.models.functions import Length, Substr

from sessions.extensions import REGISTRY
from sessions.live import in_live_window
from sessions.models import Message, PolicyChange, Session

PREVIEW_CHARS = 1200
TIMELINE_PAGE = 40  # messages per page (a page may run a little longer to end on a turn)
TIMELINE_SLACK = 30  # how much longer, at most


@dataclass(slots=True)
class TimelineMessage:
    seq: int
    role: str
    text: str  # preview of what the model sees (view when there is one, else content)
    text_len: int
    truncated: bool
    full_len: int  # length of the stored content
    tool_calls: list[dict[str, Any]]
    tool_call_id: str | None
    name: str | None
    reasoning: str | None
    reasoning_len: int
    output_ref: str | None
    view_state: str
    token_count: int
    created_at: datetime
    compacted: bool  # before the live window: summarised away
    has_parts: bool
    retracted: bool = False  # taken out of the window by the agent (kept for the record)
    # the conversation's start a sandwich compaction kept live
    # (docs/concepts/compaction.md#sandwich-head)
    head: bool = False

    @property
    def badges(self) -> list[str]:
        out = []
        if self.view_state and self.view_state != "full":
            out.append(self.view_state)
        if self.output_ref and self.view_state == "full" and not self.holds_result:
            out.append("stored")
        if self.compacted:
            out.append("summarised")
        if self.head:
            out.append("head")
        if self.retracted:
            out.append("retracted")
        return out

    @property
    def more_chars(self) -> int:
        return max(0, self.text_len - len(self.text))

    @property
    def holds_result(self) -> bool:
        """A built-in tool's result: its text is the message's own; ``output_ref`` is
        the ref it read, so expanding shows the message, not that whole output."""
        return (
            self.role == "tool"
            and bool(self.output_ref)
            and self.name in REGISTRY.tools
            and self.full_len > 0
        )

    @property
    def expandable(self) -> bool:
        return bool(self.output_ref) or self.truncated or self.view_state != "full"


@dataclass(slots=True)
class CallPair:
    id: str
    name: str
    arguments: str  # pretty JSON, cut
    result: TimelineMessage | None = None
    preview: str = ""  # the arguments on one line, cut: shown inline without a click


@dataclass(slots=True)
class Step:
    """A user message, an assistant message with its paired tool results, or an orphan result."""

    message: TimelineMessage
    calls: list[CallPair] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return self.message.token_count + sum(c.result.token_count for c in self.calls if c.result)

    @property
    def kind(self) -> str:
        return self.message.role


@dataclass(slots=True)
class Turn:
    number: int  # 1-based user turn; 0 for messages before the first user message
    steps: list[Step]
    continued: bool  # the turn started on an older page
    first_seq: int
    last_seq: int
    # Audit lines (policy changes) made while the session's last message was in this turn.
    events: list[PolicyChange] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.steps)

    @property
    def message_count(self) -> int:
        return sum(1 + sum(1 for c in s.calls if c.result) for s in self.steps)

    @property
    def tool_calls(self) -> int:
        return sum(len(s.calls) for s in self.steps)


@dataclass(slots=True)
class TimelinePage:
    turns: list[Turn]  # newest first
    before: int | None  # cursor for the next (older) page
    newest_seq: int
    events_before: list[PolicyChange] = field(default_factory=list)  # before the first message
    target_seq: int | None = None  # a jump's message, highlighted
    partial_top: bool = False  # newer messages exist above this page (a jump)


def _timeline_values(qs: QuerySet[Message]) -> QuerySet:
    return qs.annotate(
        text_preview=Substr("content", 1, PREVIEW_CHARS),
        text_len=Length("content"),
        view_preview=Substr("view", 1, PREVIEW_CHARS),
        view_len=Length("view"),
        reasoning_preview=Substr("reasoning", 1, PREVIEW_CHARS),
        reasoning_len=Length("reasoning"),
    ).values(
        "seq",
        "role",
        "text_preview",
        "text_len",
        "view_preview",
        "view_len",
        "tool_calls",
        "tool_call_id",
        "name",
        "reasoning_preview",
        "reasoning_len",
        "output_ref",
        "view_state",
        "token_count",
        "created_at",
        "parts",
        "retracted_at",
    )


INLINE_ARGS_CHARS = 160


def _arguments_inline(arguments: Any, limit: int = INLINE_ARGS_CHARS) -> str:
    """The arguments on one line (compact JSON), cut at ``limit`` characters."""
    text = (
        arguments
        if isinstance(arguments, str)
        else json.dumps(arguments, ensure_ascii=False, separators=(", ", ": "))
    )
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _arguments_preview(arguments: Any, limit: int = 800) -> str:
    text = (
        arguments
        if isinstance(arguments, str)
        else json.dumps(arguments, indent=2, ensure_ascii=False)
    )
    return text if len(text) <= limit else text[:limit] + " …"


def _to_timeline(row: dict[str, Any], window_start: int, head_end: int = 0) -> TimelineMessage:
    has_view = row["view_len"] is not None
    text = row["view_preview"] if has_view else row["text_preview"]
    text_len = row["view_len"] if has_view else row["text_len"]
    return TimelineMessage(
        seq=row["seq"],
        role=row["role"],
        text=text or "",
        text_len=text_len or 0,
        truncated=(text_len or 0) > PREVIEW_CHARS,
        full_len=row["text_len"] or 0,
        tool_calls=list(row["tool_calls"] or ()),
        tool_call_id=row["tool_call_id"],
        name=row["name"],
        reasoning=row["reasoning_preview"],
        reasoning_len=row["reasoning_len"] or 0,
        output_ref=row["output_ref"],
        view_state=row["view_state"],
        token_count=row["token_count"],
        created_at=row["created_at"],
        compacted=not in_live_window(row["seq"], window_start, head_end),
        head=row["seq"] < window_start and in_live_window(row["seq"], window_start, head_end),
        has_parts=row["parts"] is not None,
        retracted=row["retracted_at"] is not None,
    )


def _page_rows(
    rows_desc: list[dict[str, Any]], limit: int, *, older: bool
) -> tuple[list[dict[str, Any]], bool]:
    """Choose where an older-going page stops, given rows newest first; → (page, more).

    Prefer ending on a user message (a whole turn) within the slack; never end
    on a tool result, whose call would fall on the next page. ``older``: the
    database holds rows older than the ones given.
    """
    if len(rows_desc) <= limit:
        return rows_desc, older
    for i in range(limit - 1, len(rows_desc)):
        if rows_desc[i]["role"] == "user":
            return rows_desc[: i + 1], i + 1 < len(rows_desc) or older
    # No user message close by: at least don't separate results from their call.
    end = limit
    while end < len(rows_desc) and rows_desc[end - 1]["role"] == "tool":
        end += 1
    return rows_desc[:end], end < len(rows_desc) or older


def timeline_page(
    session: Session, *, before: int | None = None, limit: int = TIMELINE_PAGE
) -> TimelinePage:
    """One page of the timeline, newest turns first: 2 queries.

    Seqs are contiguous from 1 (the transcript is append-only), so a page is a
    seq range: an index range scan of (session, seq) that reads ~70 rows
    whatever the session's size, even when the planner's statistics are stale
    (an ORDER BY … LIMIT can otherwise sort the whole session first).
    """
    upper = min(before, session.last_seq + 1) if before is not None else session.last_seq + 1
    lower = max(1, upper - (limit + TIMELINE_SLACK))
    qs = Message.objects.filter(session=session, seq__gte=lower, seq__lt=upper)
    rows_desc = list(_timeline_values(qs.order_by("-seq")))
    rows_desc, more = _page_rows(rows_desc, limit, older=lower > 1)
    if not rows_desc:
        events = list(PolicyChange.objects.filter(session=session).order_by("id")[:50])
        return TimelinePage(
            turns=[], before=None, newest_seq=session.last_seq, events_before=events
        )
    oldest = rows_desc[-1]["seq"]
    # Turn numbers: user messages up to and including the page's oldest message.
    users_before = Message.objects.filter(
        session=session, role=Message.Role.USER, seq__lte=oldest
    ).count()

    messages = [
        _to_timeline(r, session.window_start_seq, session.head_end_seq) for r in reversed(rows_desc)
    ]
    turns: list[Turn] = []
    number = users_before - (1 if messages[0].role == "user" else 0)
    current: Turn | None = None
    open_calls: dict[str, CallPair] = {}
    for msg in messages:
        if msg.role == "user" or current is None:
            if msg.role == "user":
                number += 1
            current = Turn(
                number=number,
                steps=[],
                continued=msg.role != "user",
                first_seq=msg.seq,
                last_seq=msg.seq,
            )
            turns.append(current)
        current.last_seq = msg.seq
        if msg.role == "tool" and msg.tool_call_id in open_calls:
            open_calls.pop(msg.tool_call_id).result = msg
            continue
        step = Step(message=msg)
        if msg.role == "assistant":
            for call in msg.tool_calls:
                args = call.get("arguments") or {}
                pair = CallPair(
                    id=str(call.get("id", "")),
                    name=str(call.get("name", "")),
                    arguments=_arguments_preview(args),
                    preview=_arguments_inline(args),
                )
                step.calls.append(pair)
                open_calls[pair.id] = pair
        current.steps.append(step)
    page = TimelinePage(
        turns=list(reversed(turns)),
        before=oldest if more else None,
        newest_seq=rows_desc[0]["seq"],
        partial_top=rows_desc[0]["seq"] < session.last_seq,
    )
    _place_events(session, page, turns, low=oldest if more else 0, high=rows_desc[0]["seq"])
    return page


def _place_events(
    session: Session, page: TimelinePage, turns_asc: list[Turn], *, low: int, high: int
) -> None:
    """Put the audit lines made while the page's messages were the newest into
    their turns: 1 query, bounded by the page's seq range."""
    events = PolicyChange.objects.filter(
        session=session, after_seq__gte=low, after_seq__lte=high
    ).order_by("id")[:200]
    for event in events:
        turn = next((t for t in turns_asc if t.first_seq <= event.after_seq <= t.last_seq), None)
        if turn is None:
            page.events_before.append(event)
        else:
            turn.events.append(event)
