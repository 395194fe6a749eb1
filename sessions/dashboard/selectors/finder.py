"""Finding one's way in a long session: jump to a seq or a turn, filters, transcript search.

Every read here is one or two queries whatever the session's size: filters
and search walk the (session, seq) index newest first and stop after a page;
"largest" sorts one session's token counts; full-text search on PostgreSQL
uses the GIN index of the session's words (``MessageSearch``, migration 0020,
brought up to date by ``services.search_index`` first), and SQLite falls back
to a case-insensitive substring match.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import connection
from django.db.models import Q, QuerySet, Subquery
from django.db.models.expressions import RawSQL
from django.db.models.functions import Substr

from sessions.models import Message, Session

from .timeline import (
    TimelineMessage,
    TimelinePage,
    _timeline_values,
    _to_timeline,
    timeline_page,
)

FIND_PAGE = 30
MAX_QUERY_CHARS = 200
LARGEST_PAGES = 20  # "largest" pages by offset: bounded, so no deep OFFSET scans
ERROR_HEAD_CHARS = 2000  # the errors filter looks at the start of a tool result
ERROR_WORDS = ("error", "traceback", "exception", "failed")
FTS_QUERY = "websearch_to_tsquery('simple'::regconfig, %s)"

FILTERS: dict[str, str] = {
    "": "All messages",
    "user": "User messages",
    "assistant": "Assistant messages",
    "tool": "Tool results",
    "trimmed": "Trimmed outputs",
    "cut": "Cut or offloaded outputs",
    "largest": "Largest messages",
    "errors": "Errors",
}


@dataclass(slots=True)
class FindResult:
    kind: str
    q: str
    messages: list[TimelineMessage] = field(default_factory=list)
    before: int | None = None  # keyset cursor of the next page (newest-first modes)
    next_page: int | None = None  # "largest": the next page number
    page: int = 1
    full_text: bool = False  # PostgreSQL full-text search (else a substring match)

    @property
    def label(self) -> str:
        return FILTERS.get(self.kind, "")


def uses_full_text() -> bool:
    return connection.vendor == "postgresql"


# The matches as one set, first, through the GIN index of the session's words
# (``MessageSearch``, brought up to date by ``services.search_index`` before a search).
FTS_MATCHES = (
    "SELECT m.id FROM agent_sessions_messagesearch x JOIN agent_sessions_message m"
    " ON m.session_id = x.session_id AND m.seq = x.seq"
    f" WHERE x.session_id = %s AND x.document @@ {FTS_QUERY}"
)


def _search(qs: QuerySet[Message], session: Session, q: str) -> QuerySet[Message]:
    if uses_full_text():
        return qs.filter(pk__in=RawSQL(FTS_MATCHES, [session.pk, q]))
    return qs.filter(content__icontains=q)


def _errors(qs: QuerySet[Message]) -> QuerySet[Message]:
    """Tool results the provider flagged (``is_error``), or whose start reads like one."""
    head = Q()
    for word in ERROR_WORDS:
        head |= Q(error_head__icontains=word)
    flagged = Q(parts__0__provider_meta__is_error=True)
    return (
        qs.filter(role=Message.Role.TOOL)
        .annotate(error_head=Substr("content", 1, ERROR_HEAD_CHARS))
        .filter(head | flagged)
    )


def find_messages(
    session: Session, *, kind: str = "", q: str = "", before: int | None = None, page: int = 1
) -> FindResult:
    """One page of the messages a filter and/or a search select: 1 query."""
    kind = kind if kind in FILTERS else ""
    q = " ".join(q.split())[:MAX_QUERY_CHARS]
    result = FindResult(kind=kind, q=q, full_text=bool(q) and uses_full_text())
    qs = Message.objects.filter(session=session)
    if kind in ("user", "assistant", "tool"):
        qs = qs.filter(role=kind)
    elif kind == "trimmed":
        qs = qs.filter(view_state__in=("trimmed", "cleared"))
    elif kind == "cut":
        qs = qs.filter(view_state__in=("cut", "offloaded"))
    elif kind == "errors":
        qs = _errors(qs)
    if q:
        qs = _search(qs, session, q)
    if kind == "largest":
        page = max(1, min(page, LARGEST_PAGES))
        start = (page - 1) * FIND_PAGE
        # The page's ids first (integers only), then their texts: sorting the
        # previews of every message would cut and measure all of them.
        top = qs.order_by("-token_count", "-seq").values("pk")[start : start + FIND_PAGE + 1]
        page_qs = Message.objects.filter(pk__in=Subquery(top)).order_by("-token_count", "-seq")
        rows = list(_timeline_values(page_qs))
        result.page = page
        if len(rows) > FIND_PAGE and page < LARGEST_PAGES:
            result.next_page = page + 1
    else:
        if before is not None:
            qs = qs.filter(seq__lt=before)
        rows = list(_timeline_values(qs.order_by("-seq"))[: FIND_PAGE + 1])
        if len(rows) > FIND_PAGE:
            result.before = rows[FIND_PAGE - 1]["seq"]
    result.messages = [
        _to_timeline(r, session.window_start_seq, session.head_end_seq) for r in rows[:FIND_PAGE]
    ]
    return result


def turn_start_seq(session: Session, turn: int) -> int | None:
    """The seq of turn ``turn``'s user message (turns count user messages from 1): 1 query."""
    if turn < 1:
        return None
    return _user_seq(session, turn - 1)


def turn_end_seq(session: Session, turn: int) -> int:
    """The last seq of turn ``turn`` (1-based): just before the next user message: 1 query."""
    following = _user_seq(session, max(turn, 0))
    return following - 1 if following is not None else session.last_seq


def _user_seq(session: Session, index: int) -> int | None:
    """The seq of the session's ``index``-th user message (0-based), or None past the last."""
    seqs = Message.objects.filter(session=session, role=Message.Role.USER).order_by("seq")
    return next(iter(seqs.values_list("seq", flat=True)[index : index + 1]), None)


JUMP_NEWER = 3  # messages shown above a jump's target


def timeline_around(session: Session, seq: int) -> TimelinePage:
    """The timeline page holding message ``seq``, near its top, the message marked: 3 queries."""
    page = timeline_page(session, before=min(seq + 1 + JUMP_NEWER, session.last_seq + 1))
    page.target_seq = seq
    return page
