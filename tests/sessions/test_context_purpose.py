"""GET /context's ``purpose``: a build a model takes is a priced call, a look is not
(docs/api.md#context-purpose)."""

from __future__ import annotations

import pytest

from sessions.models import ContextCall, Session

pytestmark = pytest.mark.django_db

NO_AUTO = {"compaction": {"auto": False}}


def _say(alice, sid: str, text: str) -> None:
    response = alice.post(
        f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": text}]}
    )
    assert response.status_code == 200, response.content


def _calls(sid: str) -> list[ContextCall]:
    return list(ContextCall.objects.filter(session__external_id=sid).order_by("id"))


def test_a_raw_read_is_not_a_call_and_a_provider_format_is(alice, make_session):
    sid = make_session(id="purpose")["id"]
    _say(alice, sid, "list the files")
    raw = alice.get(f"sessions/{sid}/context", format="raw")
    assert raw.status_code == 200
    assert raw.json()["budget"]["used"] > 0
    assert _calls(sid) == []

    sent = alice.get(f"sessions/{sid}/context")  # anthropic: the default is a call
    assert sent.status_code == 200
    [call] = _calls(sid)
    assert call.purpose == "call" and call.cost_usd is not None and call.cost_usd > 0


def test_purpose_overrides_the_format_default(alice, make_session):
    sid = make_session(id="purpose2")["id"]
    _say(alice, sid, "hello")
    assert alice.get(f"sessions/{sid}/context", format="openai", purpose="read").status_code == 200
    assert _calls(sid) == []
    assert alice.get(f"sessions/{sid}/context", format="raw", purpose="call").status_code == 200
    [call] = _calls(sid)
    assert call.format == "raw" and call.cost_usd is not None


def test_session_cost_counts_only_calls(alice, make_session):
    sid = make_session(id="purpose3")["id"]
    _say(alice, sid, "hello")
    alice.get(f"sessions/{sid}/context")
    cost_once = sum(c.cost_usd for c in _calls(sid))
    for _ in range(3):
        alice.get(f"sessions/{sid}/context", format="raw")
        alice.get(f"sessions/{sid}/context", purpose="read")
    assert sum(c.cost_usd for c in _calls(sid)) == cost_once


def test_a_read_does_not_end_the_session_at_final(alice, make_session):
    sid = make_session(
        id="purpose4", context_window=4_000, max_output_tokens=500, buffer_tokens=0, policy=NO_AUTO
    )["id"]
    _say(alice, sid, "x " * 7_200)
    body = alice.get(f"sessions/{sid}/context", format="raw").json()
    assert body["budget"]["guard"]["status"] == "final"
    assert Session.objects.get(external_id=sid).status == "active"
    alice.get(f"sessions/{sid}/context")
    assert Session.objects.get(external_id=sid).status == "final"


def test_purpose_must_be_call_or_read(alice, make_session):
    sid = make_session(id="purpose5")["id"]
    response = alice.get(f"sessions/{sid}/context", purpose="peek")
    assert response.status_code == 422
    assert "purpose" in response.text
