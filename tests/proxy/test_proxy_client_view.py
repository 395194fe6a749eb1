"""The client's view is a chain hash: a grown history costs the same at any length; a divergence reads the entries."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from contextsvc.engine.providers import anthropic as anthropic_format
from proxy.models import ClientView, ClientViewEntry
from proxy.services.sync import (
    MARKER,
    client_view_add_reply,
    plan_client_sync,
    session_sync_client_view,
)
from sessions.dashboard.charts import usage_chart
from sessions.dashboard.selectors.usage import usage_over_turns, window_events
from sessions.extensions import CLIENT_COMPACTION
from sessions.models import Message
from sessions.services.sessions import session_create

pytestmark = pytest.mark.django_db


def _convert(messages: list[dict], offset: int) -> list[dict]:
    return anthropic_format.messages_to_transcript(messages)


def history(n: int) -> list[dict]:
    out = []
    for i in range(n // 2):
        out.append({"role": "user", "content": f"step {i}"})
        out.append({"role": "assistant", "content": [{"type": "text", "text": f"done {i}"}]})
    return out


def sync(session, messages):
    return session_sync_client_view(session=session, messages=messages, to_transcript=_convert)


@pytest.fixture
def session(alice_key):
    return session_create(owner=alice_key[0], data={"model": "claude-opus-4-5", "id": "ses_view"})


def _view_sql(session, messages) -> tuple[int, bool]:
    """Characters of SQL the sync sent about the view, and whether it read the entries."""
    with CaptureQueriesContext(connection) as queries:
        sync(session, messages)
    sql = [q["sql"] for q in queries.captured_queries if "proxy_clientview" in q["sql"]]
    reads = any(s.startswith("SELECT") and "proxy_clientviewentry" in s for s in sql)
    return sum(map(len, sql)), reads


def test_a_grown_history_is_checked_in_one_comparison_at_any_length(session):
    sizes = {}
    for n in (20, 400):
        messages = history(n) + [{"role": "user", "content": "next"}]
        sync(session, messages)
        messages += [
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
            {"role": "user", "content": "more"},
        ]
        sizes[n], reads = _view_sql(session, messages)
        assert not reads
        session.refresh_from_db()
        # the next size starts a new client view: a fresh session keeps the test simple
        ClientView.objects.filter(session=session).delete()
    # The view's SQL carries the new messages' entries only, not the history
    # (the few characters more are the larger indexes and counts).
    assert sizes[400] - sizes[20] < 10


def test_the_echoed_reply_is_not_new_and_needs_no_entry_read(session):
    messages = history(10) + [{"role": "user", "content": "q"}]
    sync(session, messages)
    client_view_add_reply(session=session, fingerprint="stored-reply")
    view = ClientView.objects.get(session=session)
    assert (view.count, view.reply_at) == (12, 11)
    # the SDK re-serialised the reply: its fingerprint differs, it is still the echo
    echoed = [
        *messages,
        {"role": "assistant", "content": "the reply"},
        {"role": "user", "content": "q2"},
    ]
    before = Message.objects.filter(session=session).count()
    _, reads = _view_sql(session, echoed)
    assert not reads
    assert Message.objects.filter(session=session).count() == before + 1
    assert ClientViewEntry.objects.filter(view=view, index__lt=13).count() == 13


def test_a_divergence_reads_the_entries_to_find_the_common_prefix(session):
    messages = history(30) + [{"role": "user", "content": "q"}]
    sync(session, messages)
    edited = [*messages[:12], {"role": "user", "content": "summary of the rest"}]
    _, reads = _view_sql(session, edited)
    assert reads
    marker = Message.objects.filter(session=session, content__contains="client's history changed")
    assert marker.get().content == MARKER.format(at=12)
    view = ClientView.objects.get(session=session)
    assert (view.count, view.divergences) == (13, 1)
    # the view is the new one: the same history again is not a divergence
    _, reads = _view_sql(session, [*edited, {"role": "assistant", "content": "a"}])
    assert not reads and ClientView.objects.get(session=session).divergences == 1


def test_a_divergence_is_a_client_compaction_on_the_usage_chart(session):
    messages = history(10) + [{"role": "user", "content": "q"}]
    sync(session, messages)
    sync(
        session, [{"role": "user", "content": "my own summary"}, {"role": "user", "content": "go"}]
    )
    marker = Message.objects.get(session=session, content__contains="client's history changed")
    session.refresh_from_db()
    events = window_events(session)
    assert [(e.after_seq, e.start_seq, e.kind) for e in events] == [
        (marker.seq, marker.seq + 1, CLIENT_COMPACTION)
    ]
    series = usage_over_turns(session)
    assert series.has_client_compactions and not series.has_restores
    marked = [bar for bar in series.bars if bar.last_event == CLIENT_COMPACTION]
    assert len(marked) == 1
    chart = usage_chart(series)
    assert sum("client compacted its own history" in bar.tip for bar in chart.bars) == 1


def _planned_sync(session, messages, plan):
    return session_sync_client_view(
        session=session, messages=messages, to_transcript=_convert, plan=plan
    )


def test_a_planned_sync_updates_the_view_in_one_statement(session):
    messages = history(6) + [{"role": "user", "content": "next"}]
    sync(session, messages)
    messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    plan = plan_client_sync(
        view=ClientView.objects.get(session=session), messages=messages, to_transcript=_convert
    )
    with CaptureQueriesContext(connection) as queries:
        synced = _planned_sync(session, messages, plan)
    views = [q["sql"] for q in queries.captured_queries if '"proxy_clientview"' in q["sql"]]
    assert len(views) == 1 and views[0].startswith("UPDATE")  # no locking read
    assert (synced.appended, synced.count) == (2, len(messages))
    view = ClientView.objects.get(session=session)
    assert (view.count, view.chain) == (synced.count, synced.chain)
    assert ClientViewEntry.objects.filter(view=view).count() == len(messages)


def test_a_plan_overtaken_by_another_sync_is_made_again_and_appends_nothing_twice(session):
    messages = history(6) + [{"role": "user", "content": "next"}]
    sync(session, messages)
    messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    stale = plan_client_sync(
        view=ClientView.objects.get(session=session), messages=messages, to_transcript=_convert
    )
    sync(session, messages)  # a concurrent call with the same history synced first
    synced = _planned_sync(session, messages, stale)
    assert synced.appended == 0
    assert Message.objects.filter(session=session).count() == len(messages)
