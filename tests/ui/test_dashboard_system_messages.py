"""The inspector shows a mid-conversation system message at its place in the timeline."""

from __future__ import annotations

import pytest
from django.urls import reverse

from sessions.models import Session

pytestmark = pytest.mark.django_db


def test_the_inspector_shows_a_system_message_in_the_timeline(op, alice, make_session):
    sid = make_session(id="sys-ui")["id"]
    messages = [
        {"role": "user", "content": "List the files"},
        {"role": "system", "content": "Use <Bash> for shell commands."},
        {"role": "assistant", "content": "Done."},
    ]
    assert alice.post(f"sessions/{sid}/messages", {"messages": messages}).status_code == 200
    session = Session.objects.get(external_id=sid)
    page = op.get(reverse("dashboard:session_detail", args=[session.pk])).content.decode()
    assert 'class="msg msg-system' in page
    assert '<span class="role role-system">system</span>' in page
    assert "Use &lt;Bash&gt; for shell commands." in page
