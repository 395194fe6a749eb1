"""The Gemini summariser inside a real ``celery worker`` (PostgreSQL and Redis, as
``test_worker_e2e``): plain httpx against the local fake Gemini API, its own retry of
a 429 (the API's ``RetryInfo`` delay honoured) included."""

from __future__ import annotations

import pytest

from fakes.gemini_rules import validate
from fakes.gemini_server import FakeGemini
from sessions.models import Session

from .conftest import SMALL, turn
from .test_worker_e2e import _wait_for_run, start_worker, worker_env  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.needs_worker]


def test_worker_summarises_through_the_gemini_api(alice, alice_key, start_worker):  # noqa: F811
    with FakeGemini(api_key="test-key") as fake:
        worker = start_worker(
            CONTEXTSVC_SUMMARIZER="gemini",
            CONTEXTSVC_SUMMARIZER_GEMINI_API_KEY="test-key",
            CONTEXTSVC_SUMMARIZER_GEMINI_BASE_URL=fake.base_url,
            CONTEXTSVC_SUMMARIZER_GEMINI_MODEL="gemini-fake-flash",
            CONTEXTSVC_SUMMARIZER_MAX_RETRIES="1",
        )
        fake.fail_next(429)
        # The summariser's own request shape (not the session's cached prefix).
        legacy = {"compaction": {"summary_reuse_cache": False}}
        body = {**SMALL, "model": "gemini-fake-pro", "id": "e2e-gemini", "policy": legacy}
        assert alice.post("sessions", body).status_code == 201
        for t in range(5):
            alice.post("sessions/e2e-gemini/messages", {"messages": turn(t)})
        response = alice.post("sessions/e2e-gemini/compact", {"strategy": "summarize"})
        assert response.status_code == 202, response.content
        session = Session.objects.get(owner=alice_key[0], external_id="e2e-gemini")
        run = _wait_for_run(session, worker=worker)
        assert run.status == "succeeded", (run.error, worker.log())
        sent = fake.generate_requests()
        assert [r.status for r in sent] == [429, 200]
        assert sent[-1].path == "/v1beta/models/gemini-fake-flash:generateContent"
        assert sent[-1].headers["x-goog-api-key"] == "test-key"
        validate(sent[-1].body)
        assert "tools" not in sent[-1].body
    detail = alice.get(f"compactions/{run.pk}").json()
    assert (detail["summarizer"], detail["model"]) == ("gemini", "gemini-fake-flash")
    session.refresh_from_db()
    assert "Fake summary of" in session.summary  # the fake's answer to a summary request
