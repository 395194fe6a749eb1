"""The inspector on a built-in tool's result: it points into the ref it read, and
expanding it shows the result's own text (the message), not that whole output."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from sessions.models import Message, Session
from tests.conftest import tool_turn
from tests.ui.conftest import HX
from tests.ui.test_dashboard_policy import _form

pytestmark = pytest.mark.django_db

LOG = "".join(f"line {i}: {'hit' if i % 7 == 0 else 'miss'}\n" for i in range(500))


def test_expanding_a_grep_result_shows_the_result_not_the_ref(op, alice):
    assert (
        alice.post("sessions", {"model": "claude-sonnet-4-5", "id": "ses_ui_br"}).status_code == 201
    )
    posted = alice.post("sessions/ses_ui_br/messages", {"messages": tool_turn("c1", LOG)})
    ref = posted.json()["messages"][-1]["output_ref"]
    arguments = {"ref_id": ref, "pattern": "hit", "max_matches": 3}
    result = alice.post("sessions/ses_ui_br/tools/tool_output_cache_grep/call", arguments).json()
    turn = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c2", "name": "tool_output_cache_grep", "arguments": arguments}],
        },
        {"role": "tool", "tool_call_id": "c2", "content": json.dumps(result)},
    ]
    assert alice.post("sessions/ses_ui_br/messages", {"messages": turn}).status_code == 200
    session = Session.objects.get(external_id="ses_ui_br")
    seq = Message.objects.get(session=session, tool_call_id="c2").seq

    page = op.get(reverse("dashboard:session_detail", args=[session.pk])).content.decode()
    article = page[page.index(f'id="msg-{seq}"') :]
    article = article[: article.index("</article>")]
    assert reverse("dashboard:message_full", args=[session.pk, seq]) in article
    assert "Open full output" not in article
    full = op.get(reverse("dashboard:message_full", args=[session.pk, seq]), headers=HX)
    text = full.content.decode()
    assert "line 7: hit" in text and "line 1: miss" not in text  # the result, not the log


def test_the_policy_form_shows_and_sets_the_builtin_round_limit(op, make_dash_session):
    session = make_dash_session(turns=1)
    url = reverse("dashboard:session_policy", args=[session.pk])
    page = op.get(url).content.decode()
    assert 'data-field="proxy.max_builtin_rounds"' in page
    data = _form(page)
    bad = op.post(url, {**data, "proxy.max_builtin_rounds": "0"})
    assert bad.status_code == 422
    assert 'data-error-for="proxy.max_builtin_rounds"' in bad.content.decode()
    assert op.post(url, {**data, "proxy.max_builtin_rounds": "3"}).status_code == 302
    session.refresh_from_db()
    assert session.policy["proxy"]["max_builtin_rounds"] == 3
