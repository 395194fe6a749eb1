"""The inspector shows every compaction knob and offers every strategy
(docs/concepts/compaction.md#chain)."""

from __future__ import annotations

import re

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
    names = ("planner", "target_ratio", "summary_max_tokens", "pin_task", "keep_last_n")
    for name in (*names, "chunk_size", "levels"):
        assert f"<code>{name}</code>" in html
    assert "<td>0.3</td>" in html and "<td>12</td>" in html and "<td>cost</td>" in html
    for value in ("sliding_window", "full_history", "tree"):
        assert f'<option value="{value}"' in html


def test_the_policy_page_selects_the_tree_strategy_and_its_knobs(op, make_dash_session):
    """the tree strategy (docs/concepts/compaction.md#tree) is offered in the policy page's strategy
    select; the knobs are checked by the API's schema (bounds), and a valid choice is stored."""
    from tests.ui.test_dashboard_policy import _form

    session = make_dash_session(turns=1)
    url = reverse("dashboard:session_policy", args=[session.pk])
    page = op.get(url).content.decode()
    select = re.search(
        r'<select id="pf-[^"]+" name="compaction.strategy"[^>]*>(.*?)</select>', page, re.S
    )
    assert select and '<option value="tree"' in select.group(1)
    data = _form(page)
    data.update({"compaction.strategy": "tree", "compaction.levels": "9"})
    bad = op.post(url, data)
    assert bad.status_code == 422 and 'data-error-for="compaction.levels"' in bad.content.decode()
    data.update({"compaction.levels": "2", "compaction.chunk_size": "10"})
    assert op.post(url, data).status_code == 302
    session.refresh_from_db()
    assert session.policy["compaction"] == {"strategy": "tree", "chunk_size": 10, "levels": 2}


def test_the_policy_page_explains_the_insertion_cap_of_tool_output_views(op, make_dash_session):
    session = make_dash_session(turns=1)
    page = op.get(reverse("dashboard:session_policy", args=[session.pk])).content.decode()
    assert 'data-field="tool_output_cache.view_share"' in page
    assert "of the usable window: views over" in page
