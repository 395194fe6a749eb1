"""The inspector on a built-in tool's result: it points into the ref it read, and
expanding it shows the result's own text (the message), not that whole output."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from sessions.models import Message, Session
from tests.conftest import tool_turn
from tests.ui.conftest import HX

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
