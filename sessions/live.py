"""Which seqs are in a session's live window: the sandwich's head and the recent part.

The live window is every seq from ``window_start_seq`` on, plus — after a
a sandwich compaction (docs/concepts/compaction.md#sandwich-head) — the conversation's head, seqs up
to ``head_end_seq``, kept as messages while the middle is summarised. Every read
of "the live messages" filters with ``live_q`` so the head is never forgotten
by one of them; without a head it is the plain range filter it always was
(one index range, no OR on the hot path).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q


def live_seq_q(window_start_seq: int, head_end_seq: int = 0, *, prefix: str = "") -> Q:
    """Seqs in the live window (``prefix``: a relation path to the message, e.g. ``"message__"``)."""
    q = Q(**{f"{prefix}seq__gte": window_start_seq})
    if 0 < head_end_seq < window_start_seq:
        q |= Q(**{f"{prefix}seq__lte": head_end_seq})
    return q


def live_q(session: Any) -> Q:
    """``live_seq_q`` of ``session``'s window."""
    return live_seq_q(session.window_start_seq, getattr(session, "head_end_seq", 0) or 0)


def has_head(session: Any) -> bool:
    """Whether the live window has a head before a gap (a sandwich compaction)."""
    head = getattr(session, "head_end_seq", 0) or 0
    return 0 < head < session.window_start_seq


def in_live_window(seq: int, window_start_seq: int, head_end_seq: int = 0) -> bool:
    """Whether ``seq`` is live (the Python twin of ``live_seq_q``, for listings)."""
    return seq >= window_start_seq or (0 < head_end_seq < window_start_seq and seq <= head_end_seq)
