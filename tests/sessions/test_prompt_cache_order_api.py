"""docs/concepts/caching.md#cacheable-first over the API: cacheable sections first within a kind,
breakpoints only before change."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

BIG = "You are a careful coding agent. " * 300  # above the 1,024-token minimum
RULES = "Always run the tests before you commit. " * 100
SECTIONS = [
    {
        "name": "rules-live",
        "content": "Today's focus: the parser.",
        "kind": "rules",
        "cacheable": False,
    },
    {"name": "base", "content": BIG, "kind": "base"},
    {"name": "rules", "content": RULES, "kind": "rules"},
]


def setup(alice, make_session, sections=SECTIONS, **policy) -> str:
    sid = make_session(policy=policy)["id"]
    assert alice.put(f"sessions/{sid}/system", sections).status_code == 200
    return sid


def system_texts(alice, sid: str) -> list[dict]:
    return alice.get(f"sessions/{sid}/context", format="anthropic").json()["system"]


def test_s002_4_api_cacheable_section_sent_before_the_dynamic_one_of_its_kind(alice, make_session):
    sid = setup(alice, make_session)
    alice.post(f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "hi"}]})
    system = system_texts(alice, sid)
    assert [b["text"] for b in system] == [BIG, RULES, "Today's focus: the parser."]
    # The breakpoint ends the cacheable run: both static sections are cached.
    assert [("cache_control" in b) for b in system] == [False, True, False]


def test_s002_4_api_cacheable_first_off_keeps_the_posted_order(alice, make_session):
    sid = setup(alice, make_session, prompt_cache={"cacheable_first": False})
    alice.post(f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "hi"}]})
    system = system_texts(alice, sid)
    assert [b["text"] for b in system] == [BIG, "Today's focus: the parser.", RULES]
    assert [("cache_control" in b) for b in system] == [True, False, False]


def test_s002_4_api_no_system_breakpoint_when_nothing_that_varies_follows(alice, make_session):
    static = [s for s in SECTIONS if s.get("cacheable", True)]
    sid = setup(alice, make_session, sections=static)
    raw = alice.get(f"sessions/{sid}/context", format="raw").json()
    assert raw["cache_breakpoints"]["system"] == [] and raw["cache_breakpoints"]["count"] == 0
    # A conversation after it varies: now the system prompt is worth an entry.
    alice.post(f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "hi"}]})
    raw = alice.get(f"sessions/{sid}/context", format="raw").json()
    assert raw["cache_breakpoints"]["system"] == [1]


def test_s002_4_api_bad_cacheable_first_is_422(alice):
    response = alice.post(
        "sessions",
        {"model": "gpt-4o", "policy": {"prompt_cache": {"cacheable_first": "sometimes"}}},
    )
    assert response.status_code == 422
    assert "cacheable_first" in str(response.json()["error"])
