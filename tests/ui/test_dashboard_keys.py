"""Agent keys page: a new key is shown once and only its hash is stored; revoke."""

from __future__ import annotations

import pytest
from django.urls import reverse

from sessions.models import AgentKey, hash_key
from tests.ui.conftest import HX

pytestmark = pytest.mark.django_db

KEYS = reverse("dashboard:key_list")


def test_lists_keys_with_their_session_counts(op, alice_key, make_dash_session):
    make_dash_session(turns=1)
    page = op.get(KEYS).content.decode()
    assert "alice" in page and alice_key[0].prefix in page
    assert f'href="/?key={alice_key[0].pk}"' in page
    assert alice_key[1] not in page  # never the raw key


def test_create_shows_the_key_once(op):
    response = op.post(KEYS, {"name": "ci-agent"}, headers=HX)
    body = response.content.decode()
    key = AgentKey.objects.get(name="ci-agent")
    raw = body.split('id="new-key" class="mono" type="text" readonly value="')[1].split('"')[0]
    assert raw.startswith("cx_") and hash_key(raw) == key.key_hash
    assert "will not be shown again" in body
    assert response["Cache-Control"] == "no-store"
    assert raw not in op.get(KEYS).content.decode()
    # the new key works on the API
    from django.test import Client

    api = Client().get("/api/v1/sessions", headers={"Authorization": f"Bearer {raw}"})
    assert api.status_code == 200


def test_create_without_htmx_renders_the_whole_page(op):
    body = op.post(KEYS, {"name": "plain"}).content.decode()
    assert "<html" in body and "will not be shown again" in body


def test_invalid_name_shows_an_error(op):
    body = op.post(KEYS, {"name": "  "}, headers=HX).content.decode()
    assert "field-error" in body and AgentKey.objects.count() == 0


def test_revoke_needs_confirmation_and_revokes(op, alice_key):
    page = op.get(KEYS).content.decode()
    assert "hx-confirm=" in page and "Revoke" in page
    body = op.post(
        reverse("dashboard:key_revoke", args=[alice_key[0].pk]), headers=HX
    ).content.decode()
    key = AgentKey.objects.get(pk=alice_key[0].pk)
    assert key.revoked_at is not None
    assert "is revoked" in body and "revoked" in body
    from django.test import Client

    api = Client().get("/api/v1/sessions", headers={"Authorization": f"Bearer {alice_key[1]}"})
    assert api.status_code == 401


def test_empty_state(op):
    assert "No agent keys yet." in op.get(KEYS).content.decode()


def test_get_only_and_post_only(op, alice_key):
    assert op.get(reverse("dashboard:key_revoke", args=[alice_key[0].pk])).status_code == 405
    assert op.delete(KEYS).status_code == 405
