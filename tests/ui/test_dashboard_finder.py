"""Long sessions: jump to a seq or a turn, filters, transcript search,
tool-call arguments inline; a constant number of queries whatever the session's size."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from sessions.dashboard.selectors.finder import FIND_PAGE
from sessions.models import Message, MessageSearch
from sessions.services.append import session_append_messages
from sessions.services.delete import session_delete
from sessions.services.search_index import search_index_sweep
from tests.ui.conftest import HX

pytestmark = pytest.mark.django_db


def _find(op, session, **params):
    url = reverse("dashboard:session_find", args=[session.pk])
    return op.get(url, params, headers=HX)


def _seqs(html: str) -> list[int]:
    return [int(s) for s in re.findall(r'<div class="found" data-seq="(\d+)"', html)]


def test_jump_to_a_seq_shows_its_page_with_the_message_marked(op, make_dash_session):
    session = make_dash_session(turns=30, tool_lines=3, usage=False)  # 120 messages
    response = _find(op, session, seq=17)
    html = response.content.decode()
    assert response.status_code == 200
    assert 'id="msg-17"' in html and re.search(r'class="msg [^"]*is-target[^"]*" id="msg-17"', html)
    assert f'id="msg-{session.last_seq}"' not in html  # not the newest page
    assert "Back to the newest messages" in html


def test_jump_to_a_turn_opens_at_its_user_message(op, make_dash_session):
    session = make_dash_session(turns=30, tool_lines=3, usage=False)
    seq = Message.objects.filter(session=session, role="user").order_by("seq")[11].seq
    html = _find(op, session, turn=12).content.decode()
    assert re.search(rf'class="msg msg-user[^"]*is-target[^"]*" id="msg-{seq}"', html)
    assert "Turn 12" in html


def test_jump_past_the_end_says_so_and_shows_the_newest_page(op, make_dash_session):
    session = make_dash_session(turns=2, usage=False)
    html = _find(op, session, seq=999).content.decode()
    assert f"No message #999 in this session (last: #{session.last_seq})" in html
    assert f'id="msg-{session.last_seq}"' in html
    assert "No turn 50" in _find(op, session, turn=50).content.decode()


def test_role_filter_lists_only_that_role_newest_first(op, make_dash_session):
    session = make_dash_session(turns=3, usage=False)
    html = _find(op, session, kind="tool").content.decode()
    tool_seqs = list(
        Message.objects.filter(session=session, role="tool")
        .order_by("-seq")
        .values_list("seq", flat=True)
    )
    assert _seqs(html) == tool_seqs
    assert "Tool results" in html and "Show #" in html


def test_trimmed_filter_and_its_empty_state(op, make_dash_session):
    session = make_dash_session(turns=3, usage=False)
    assert "No message matches." in _find(op, session, kind="trimmed").content.decode()
    seq = Message.objects.filter(session=session, role="tool").order_by("seq").first().seq
    Message.objects.filter(session=session, seq=seq).update(view_state="trimmed")
    assert _seqs(_find(op, session, kind="trimmed").content.decode()) == [seq]


def test_largest_filter_orders_by_tokens_and_pages(op, make_dash_session):
    session = make_dash_session(turns=40, tool_lines=2, usage=False)  # 160 messages
    big = Message.objects.filter(session=session, role="user").order_by("seq")[5]
    Message.objects.filter(pk=big.pk).update(token_count=99_999)
    html = _find(op, session, kind="largest").content.decode()
    seqs = _seqs(html)
    assert seqs[0] == big.seq and len(seqs) == FIND_PAGE
    tokens = dict(Message.objects.filter(session=session).values_list("seq", "token_count"))
    assert [tokens[s] for s in seqs] == sorted((tokens[s] for s in seqs), reverse=True)
    assert "page=2" in html
    second = _seqs(_find(op, session, kind="largest", page=2).content.decode())
    assert second and not set(second) & set(seqs)


def test_errors_filter_finds_flagged_and_error_looking_results(op, alice, make_dash_session):
    session = make_dash_session(turns=2, tool_lines=3, usage=False)
    sid = session.external_id
    alice.post(
        f"/api/v1/sessions/{sid}/messages",
        {
            "messages": [
                {"role": "user", "content": "run it"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": "e1", "name": "bash", "arguments": {"command": "make"}}],
                },
                {
                    "role": "tool",
                    "tool_call_id": "e1",
                    "content": "Traceback (most recent call last):\n  boom",
                },
            ]
        },
    )
    session.refresh_from_db()
    seqs = _seqs(_find(op, session, kind="errors").content.decode())
    assert session.last_seq in seqs
    roles = dict(Message.objects.filter(session=session).values_list("seq", "role"))
    assert all(roles[s] == "tool" for s in seqs)


def test_search_finds_words_anywhere_in_the_transcript(op, make_dash_session):
    session = make_dash_session(turns=12, tool_lines=2, usage=False)
    html = _find(op, session, q="module 7").content.decode()
    found = _seqs(html)
    texts = dict(Message.objects.filter(session=session).values_list("seq", "content"))
    assert found and all("7" in texts[s] and "module" in texts[s].lower() for s in found)
    mode = "full-text search" if connection.vendor == "postgresql" else "substring match"
    assert mode in html
    empty = _find(op, session, q="zebracorn").content.decode()
    assert "No message matches." in empty


def test_search_pages_with_a_seq_cursor(op, make_dash_session):
    session = make_dash_session(turns=45, tool_lines=2, usage=False)
    html = _find(op, session, kind="assistant").content.decode()
    first = _seqs(html)
    cursor = re.search(r"before=(\d+)", html)
    assert len(first) == FIND_PAGE and cursor
    more = _find(op, session, kind="assistant", before=cursor.group(1)).content.decode()
    rest = _seqs(more)
    assert rest and max(rest) < min(first)
    assert 'id="timeline"' not in more  # "More" appends rows, not a new timeline


def test_tool_call_arguments_are_inline_without_a_click(op, make_dash_session):
    session = make_dash_session(turns=2, usage=False)
    html = op.get(
        reverse("dashboard:session_timeline", args=[session.pk]), headers=HX
    ).content.decode()
    inline = re.findall(r'<code class="call-inline"[^>]*>([^<]*)</code>', html)
    assert inline and "pytest -k mod1" in inline[0]


def test_finder_reads_a_constant_number_of_queries(op, make_dash_session):
    small = make_dash_session(sid="small", turns=3, tool_lines=2, usage=False)
    large = make_dash_session(sid="large", turns=60, tool_lines=2, usage=False)
    for params in (
        {"seq": 5},
        {"turn": 2},
        {"kind": "tool"},
        {"kind": "largest"},
        {"kind": "errors"},
        {"q": "module"},
    ):
        counts = []
        for session in (small, large):
            with CaptureQueriesContext(connection) as ctx:
                assert _find(op, session, **params).status_code == 200
            counts.append(len(ctx.captured_queries))
        assert counts[0] == counts[1], (params, counts)


def test_finder_auth_and_404(visitor, make_dash_session, op):
    session = make_dash_session(turns=1, usage=False)
    url = reverse("dashboard:session_find", args=[session.pk])
    assert Client().get(url)["Location"].startswith("/accounts/login/")
    assert visitor.get(url).status_code == 403
    missing = reverse("dashboard:session_find", args=[session.pk + 999])
    assert op.get(missing, {"q": "x"}).status_code == 404


@pytest.mark.needs_postgres
def test_search_indexes_the_words_appended_since_the_last_search(op, make_dash_session):
    """Appends do not index their words; a search first indexes the messages
    appended since the session was last searched, so it finds them all."""
    session = make_dash_session(turns=3, tool_lines=2, usage=False)
    assert not MessageSearch.objects.filter(session=session).exists()
    assert _seqs(_find(op, session, q="module").content.decode())
    indexed = MessageSearch.objects.filter(session=session).count()
    assert indexed == Message.objects.filter(session=session).count()
    session_append_messages(
        session=session, messages=[{"role": "user", "content": "look at the quokkafile now"}]
    )
    session.refresh_from_db()
    assert _seqs(_find(op, session, q="quokkafile").content.decode()) == [session.last_seq]
    assert MessageSearch.objects.filter(session=session).count() == indexed + 1
    session_delete(session=session)
    assert not MessageSearch.objects.filter(session_id=session.pk).exists()


@pytest.mark.needs_postgres
def test_the_background_sweep_indexes_lately_appended_words(make_dash_session):
    session = make_dash_session(turns=2, tool_lines=2, usage=False)
    count = Message.objects.filter(session=session).count()
    assert search_index_sweep() >= count
    assert MessageSearch.objects.filter(session=session).count() == count
    assert search_index_sweep() == 0  # nothing new: nothing indexed twice
