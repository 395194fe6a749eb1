"""Stored tool outputs in the inspector: line ranges, load more, jump to line,
grep with highlighted matches — through the tool-output store, the same
functions GET /refs/{ref} and /refs/{ref}/grep call."""

from __future__ import annotations

import pytest
from django.urls import reverse

from sessions.models import Message
from tests.ui.conftest import HX

pytestmark = pytest.mark.django_db


@pytest.fixture
def stored(make_dash_session):
    """A session whose one tool output has 1,000 lines; → (session, ref)."""
    session = make_dash_session(turns=1, tool_lines=1000)
    ref = (
        Message.objects.filter(session=session, role="tool")
        .values_list("output_ref", flat=True)
        .first()
    )
    assert ref, "every tool output is stored"
    return session, ref


def view_url(session, ref) -> str:
    return reverse("dashboard:output_view", args=[session.pk, ref])


def test_timeline_offers_the_full_output(op, stored):
    session, ref = stored
    html = op.get(reverse("dashboard:session_detail", args=[session.pk])).content.decode()
    assert f"/sessions/{session.pk}/outputs/{ref}/?m=3" in html and "Open full output" in html


def test_viewer_opens_on_the_first_200_lines(op, stored):
    session, ref = stored
    body = op.get(view_url(session, ref), {"m": 3}, headers=HX).content.decode()
    assert 'id="viewer-3"' in body and "1,000 lines" in body
    assert 'id="L3-1"' in body and 'id="L3-200"' in body and 'id="L3-201"' not in body
    assert "line 0: ERROR timeout in handler" in body  # line 1 of the output
    assert "Load more · lines 201–400 of 1,000" in body
    # forms for jump and grep target the viewer body
    assert 'hx-target="#viewer-3-body"' in body


def test_load_more_appends_the_next_range_only(op, stored):
    session, ref = stored
    body = op.get(
        view_url(session, ref), {"m": 3, "part": "down", "offset": 201}, headers=HX
    ).content.decode()
    assert 'id="viewer-3"' not in body  # a range, not a new viewer
    assert 'id="L3-201"' in body and 'id="L3-400"' in body and 'id="L3-200"' not in body
    assert "↑ Lines" not in body  # going down never offers the lines above again
    last = op.get(
        view_url(session, ref), {"m": 3, "part": "down", "offset": 801}, headers=HX
    ).content.decode()
    assert 'id="L3-1000"' in last and "End of output" in last and "Load more" not in last


def test_jump_to_line_highlights_it_and_offers_lines_above(op, stored):
    session, ref = stored
    body = op.get(
        view_url(session, ref), {"m": 3, "part": "lines", "line": 500}, headers=HX
    ).content.decode()
    assert 'class="ol-row is-target" id="L3-500"' in body
    assert 'id="L3-495"' in body  # a few lines of context above
    assert "↑ Lines 295–494" in body
    up = op.get(
        view_url(session, ref), {"m": 3, "part": "up", "offset": 295, "limit": 200}, headers=HX
    )
    up_body = up.content.decode()
    assert 'id="L3-295"' in up_body and 'id="L3-494"' in up_body and 'id="L3-495"' not in up_body
    assert "Load more" not in up_body


def test_grep_marks_matches_with_line_numbers_and_context(op, stored):
    session, ref = stored
    url = reverse("dashboard:output_grep", args=[session.pk, ref])
    body = op.get(url, {"m": 3, "pattern": "ERROR", "context": 1}, headers=HX).content.decode()
    # every 37th line (0, 37, 74, …) holds ERROR: 28 lines of 1,000
    assert "<strong>28</strong> matching lines" in body
    assert "<mark>ERROR</mark>" in body
    # 1-based numbers: the text "line 37:" is line 38; its neighbours come as context
    assert "line 37: <mark>ERROR</mark>" in body
    assert '&line=38"' in body and "line 36: ok" in body
    insensitive = op.get(url, {"m": 3, "pattern": "error", "i": "1"}, headers=HX).content.decode()
    assert "<strong>28</strong>" in insensitive and "<mark>ERROR</mark>" in insensitive
    sensitive = op.get(url, {"m": 3, "pattern": "error"}, headers=HX).content.decode()
    assert "No match." in sensitive


def test_grep_escapes_the_output_text(op, make_dash_session):
    from sessions.services.append import session_append_messages

    session = make_dash_session(turns=1, tool_lines=2)
    session_append_messages(
        session=session,
        messages=[
            {"role": "user", "content": "again"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "x1", "name": "bash", "arguments": {}}],
            },
            {
                "role": "tool",
                "tool_call_id": "x1",
                "content": "ok\n<script>alert(1)</script> danger\nend",
            },
        ],
    )
    ref = (
        Message.objects.filter(session=session, tool_call_id="x1")
        .values_list("output_ref", flat=True)
        .get()
    )
    url = reverse("dashboard:output_grep", args=[session.pk, ref])
    body = op.get(url, {"pattern": "danger"}, headers=HX).content.decode()
    assert "<script>alert(1)</script>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt; <mark>danger</mark>" in body


def test_bad_pattern_is_shown_not_raised(op, stored):
    session, ref = stored
    url = reverse("dashboard:output_grep", args=[session.pk, ref])
    body = op.get(url, {"pattern": "(unclosed"}, headers=HX)
    assert body.status_code == 200 and "Invalid regular expression" in body.content.decode()
    empty = op.get(url, {"pattern": ""}, headers=HX).content.decode()
    assert "Type a pattern" in empty


def test_download_streams_the_exact_bytes(op, stored):
    session, ref = stored
    response = op.get(reverse("dashboard:output_raw", args=[session.pk, ref]))
    data = b"".join(response.streaming_content)
    assert data.decode().splitlines()[37] == "line 37: ERROR timeout in handler"
    assert len(data.splitlines()) == 1000
    assert response["Content-Disposition"].startswith("attachment")
