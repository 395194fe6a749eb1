"""The inspector's "Download transcript": the API's export, for an operator."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db


def test_the_inspector_links_the_download(op, make_dash_session):
    session = make_dash_session(turns=2)
    page = op.get(reverse("dashboard:session_detail", args=[session.pk])).content.decode()
    url = reverse("dashboard:session_transcript", args=[session.pk])
    assert f'href="{url}" download>Download transcript</a>' in page


def test_the_download_is_the_agents_export_of_any_keys_session(op, make_dash_session, alice_key):
    session = make_dash_session(turns=3)  # alice's session: operators see every key's
    response = op.get(reverse("dashboard:session_transcript", args=[session.pk]))
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == "application/x-ndjson"
    assert response["Content-Disposition"] == 'attachment; filename="run-1.jsonl"'
    body = b"".join(response.streaming_content)
    api = ApiClient(alice_key[1]).get(f"sessions/{session.external_id}/export")
    assert body == b"".join(api.streaming_content)
    lines = [json.loads(line) for line in body.splitlines()]
    assert [m["seq"] for m in lines] == list(range(1, session.last_seq + 1))
