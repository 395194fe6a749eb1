"""The transcript's full-text index (``MessageSearch``), brought up to date on search.

An append does not index its messages: the words of a session are worked out
when it is searched, for the messages appended since it was last searched, in
one ``INSERT … SELECT``. A session's messages become visible in seq order
(each append writes under the session row's lock or version), so everything
up to the highest seq indexed is indexed and the rest is the tail. Two
searches at once index the same tail; the second's rows are skipped.
Messages keep their text once appended, and their words go with the session.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import connection
from django.db.models import F, IntegerField, Max, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from sessions.models import MessageSearch, Session

# A tsvector holds at most 1 MB: the first 100,000 characters of a message.
# ``simple``: no stemming, no stop words (transcripts are code, paths and logs
# as much as English).
CATCH_UP = (
    "INSERT INTO agent_sessions_messagesearch (session_id, seq, document) "
    "SELECT m.session_id, m.seq, to_tsvector('simple'::regconfig, left(m.content, 100000)) "
    "FROM agent_sessions_message m WHERE m.session_id = %s AND m.seq > COALESCE("
    "(SELECT max(x.seq) FROM agent_sessions_messagesearch x WHERE x.session_id = %s), -1) "
    "ON CONFLICT (session_id, seq) DO NOTHING"
)


def search_index_catch_up(*, session_id: int) -> int:
    """Index the session's messages not yet indexed; how many. SQLite: none
    (the finder matches substrings there)."""
    if connection.vendor != "postgresql":
        return 0
    with connection.cursor() as cursor:
        cursor.execute(CATCH_UP, [session_id, session_id])
        return cursor.rowcount


def search_index_sweep(*, max_age_hours: int = 48, limit: int = 200) -> int:
    """Index what the sessions updated lately appended since; → messages indexed.

    Run in the background with the recall index (after a burst of appends, and
    every minute), so that a search finds at most a short tail to index."""
    if connection.vendor != "postgresql":
        return 0
    indexed = (
        MessageSearch.objects.filter(session=OuterRef("pk"))
        .values("session")
        .annotate(top=Max("seq"))
        .values("top")
    )
    behind = (
        Session.objects.filter(updated_at__gte=timezone.now() - timedelta(hours=max_age_hours))
        .annotate(indexed=Coalesce(Subquery(indexed), Value(-1), output_field=IntegerField()))
        .filter(last_seq__gt=F("indexed"))
        .order_by("updated_at")
        .values_list("pk", flat=True)[:limit]
    )
    return sum(search_index_catch_up(session_id=pk) for pk in list(behind))
