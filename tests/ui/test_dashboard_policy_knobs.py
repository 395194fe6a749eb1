"""The inspector shows every compaction knob (issue 15 point 6) and offers spec 004's strategies."""

from __future__ import annotations

import pytest
from django.urls import reverse

from sessions.models import Session

pytestmark = pytest.mark.django_db


def test_inspector_shows_the_compaction_knobs_with_defaults_and_overrides(op, make_dash_session):
    session = make_dash_session(turns=1)
    Session.objects.filter(pk=session.pk).update(
        policy={"compaction": {"target_ratio": 0.3, "keep_last_n": 12}}
    )
    html = op.get(reverse("dashboard:session_detail", args=[session.pk])).content.decode()
    assert 'id="compaction-knobs"' in html
    for name in ("planner", "target_ratio", "summary_max_tokens", "pin_task", "keep_last_n"):
        assert f"<code>{name}</code>" in html
    assert "<td>0.3</td>" in html and "<td>12</td>" in html and "<td>cost</td>" in html
    for value in ("sliding_window", "full_history"):
        assert f'<option value="{value}"' in html
