"""The policy page: the effective policy, a staff form checked by the
API's own schema with errors per field, and an audit line in the timeline."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from sessions.models import PolicyChange, Session
from sessions.schemas_policy import PolicyIn
from tests.ui.conftest import HX

pytestmark = pytest.mark.django_db


def _url(session: Session) -> str:
    return reverse("dashboard:session_policy", args=[session.pk])


def _form(page: str) -> dict[str, str]:
    """What the browser would post untouched: every input, select and textarea as shown."""
    data: dict[str, str] = {}
    for name, value in re.findall(
        r'<input id="pf-[^"]+" name="([^"]+)" type="text"[^>]*value="([^"]*)"', page
    ):
        data[name] = value
    for name, body in re.findall(
        r'<select id="pf-[^"]+" name="([^"]+)"[^>]*>(.*?)</select>', page, re.S
    ):
        chosen = re.search(r'<option value="([^"]*)" selected', body)
        data[name] = chosen.group(1) if chosen else ""
    for name, value in re.findall(
        r'<textarea id="pf-[^"]+" name="([^"]+)"[^>]*>(.*?)</textarea>', page, re.S
    ):
        data[name] = value
    return data


def test_the_page_lists_every_field_of_the_api_schema_with_defaults(op, make_dash_session):
    session = make_dash_session(turns=1)
    page = op.get(_url(session)).content.decode()
    for section, info in PolicyIn.model_fields.items():
        model = getattr(info.annotation, "__args__", (info.annotation,))[0]
        names = getattr(model, "model_fields", {section: None})
        for name in names:
            path = f"{section}.{name}" if name != section else section
            assert f'data-field="{path}"' in page, path
    # Defaults that come from the session are explained, not shown as blanks.
    assert "20,000" in page and "tool_clearing → summarize → drop_oldest_turns" in page
    assert "Circuit breaker" in page and "closed" in page
    assert "No change since the session was created." in page


def test_a_new_schema_field_appears_without_a_template_edit(op, make_dash_session, monkeypatch):
    """Other helpers add knobs to the schema: the page reads PolicyIn, not a list of names."""
    from pydantic import Field, create_model

    from sessions.schemas_policy import CompactionPolicy

    extended = create_model(
        "CompactionPolicyPlus", __base__=CompactionPolicy, clear_after_turns=(int, Field(7, ge=1))
    )
    monkeypatch.setattr(PolicyIn.model_fields["compaction"], "annotation", extended | None)
    session = make_dash_session(turns=1)
    page = op.get(_url(session)).content.decode()
    assert 'data-field="compaction.clear_after_turns"' in page and "≥ 1" in page


def test_an_operator_edits_the_policy_and_the_timeline_shows_who_changed_what(
    op, operator, make_dash_session
):
    session = make_dash_session(turns=2)
    data = _form(op.get(_url(session)).content.decode())
    data.update({"thresholds.compact_at": "0.9", "compaction.auto": "false"})
    response = op.post(_url(session), data)
    assert response.status_code == 302 and response["Location"].endswith("?saved=1")
    session.refresh_from_db()
    assert session.policy["compaction"] == {"auto": False}
    assert session.policy["thresholds"] == {"compact_at": 0.9, "block_at": 0.98}
    # The budget follows the new threshold at once, as after PATCH.
    api_like = op.get(reverse("dashboard:session_detail", args=[session.pk])).content.decode()
    assert "compact 0.9" in api_like

    change = PolicyChange.objects.get(session=session)
    assert change.actor == "operator operator" and change.after_seq == session.last_seq
    assert {c["field"] for c in change.changes} == {
        "compaction.auto",
        "thresholds.compact_at",
        "thresholds.block_at",
    }
    page = op.get(_url(session) + "?saved=1").content.decode()
    assert "Policy saved." in page and "override" in page
    timeline = op.get(reverse("dashboard:session_timeline", args=[session.pk]), headers=HX)
    text = timeline.content.decode()
    assert "Policy changed" in text and "by operator operator" in text
    assert "compaction.auto" in text and f"after #{session.last_seq}" in text


def test_bad_values_are_a_422_naming_each_field_and_change_nothing(op, make_dash_session):
    session = make_dash_session(turns=1)
    data = _form(op.get(_url(session)).content.decode())
    data.update(
        {
            "thresholds.compact_at": "1.5",
            "compaction.retain_last_turns": "many",
            "compaction.chain": "tool_clearing\nno_such_strategy",
            "targets": "{not json",
        }
    )
    response = op.post(_url(session), data)
    assert response.status_code == 422
    page = response.content.decode()
    for path in (
        "thresholds.compact_at",
        "compaction.retain_last_turns",
        "compaction.chain",
        "targets",
    ):
        assert f'data-error-for="{path}"' in page, path
    assert "less than or equal to 1" in page and "not valid JSON" in page
    assert 'value="many"' in page  # what the operator typed is shown back
    session.refresh_from_db()
    assert session.policy == {} and not PolicyChange.objects.exists()


def test_cross_field_rule_is_reported_on_its_section(op, make_dash_session):
    session = make_dash_session(turns=1)
    data = _form(op.get(_url(session)).content.decode())
    data.update({"thresholds.compact_at": "0.99", "thresholds.block_at": "0.9"})
    response = op.post(_url(session), data)
    assert response.status_code == 422
    assert 'data-error-for="thresholds"' in response.content.decode()


def test_clearing_an_override_restores_the_default(op, alice, make_dash_session):
    session = make_dash_session(turns=1)
    alice.patch(
        f"/api/v1/sessions/{session.external_id}", {"policy": {"compaction": {"auto": False}}}
    )
    data = _form(op.get(_url(session)).content.decode())
    assert data["compaction.auto"] == "false"
    data["compaction.auto"] = ""
    assert op.post(_url(session), data).status_code == 302
    session.refresh_from_db()
    assert "compaction" not in session.policy
    actors = list(PolicyChange.objects.order_by("id").values_list("actor", flat=True))
    assert actors == ["agent key alice", "operator operator"]


def test_an_untouched_form_saves_nothing(op, make_dash_session):
    session = make_dash_session(turns=1)
    data = _form(op.get(_url(session)).content.decode())
    response = op.post(_url(session), data)
    assert response.status_code == 200 and "Nothing changed" in response.content.decode()
    assert not PolicyChange.objects.exists()


def test_policy_page_auth_csrf_and_404(operator, visitor, make_dash_session):
    session = make_dash_session(turns=1)
    assert Client().get(_url(session))["Location"].startswith("/accounts/login/")
    assert visitor.get(_url(session)).status_code == 403
    assert visitor.post(_url(session), {"compaction.auto": "false"}).status_code == 403
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator)
    assert strict.post(_url(session), {"compaction.auto": "false"}).status_code == 403
    session.refresh_from_db()
    assert session.policy == {}
    missing = reverse("dashboard:session_policy", args=[session.pk + 999])
    assert strict.get(missing).status_code == 404
