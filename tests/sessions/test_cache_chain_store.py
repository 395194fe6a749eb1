"""A session's cache chain is stored, compared and read back without moving the whole of it on
every build (``prompting.services.chain``, docs/concepts/caching.md#breakpoints): the
accounting is the same as with the whole chain read and written each time."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.db import connection
from django.test.utils import CaptureQueriesContext

from prompting.models import PromptState
from prompting.services import chain
from sessions.models import Session
from tests.conftest import tool_turn

pytestmark = pytest.mark.django_db

BIG = "You are a careful coding agent. " * 300  # above the 1,024-token cache minimum


@pytest.fixture
def sid(alice, make_session):
    sid = make_session(id="chain")["id"]
    assert (
        alice.put(f"sessions/{sid}/system", [{"name": "base", "content": BIG}]).status_code == 200
    )
    turns = [{"role": "user", "content": "Fix the failing test"}]
    for n in range(12):
        turns += tool_turn(f"c{n}", f"FAILED test_{n}")
    alice.post(f"sessions/{sid}/messages", {"messages": turns})
    return sid


def build(alice, sid: str) -> dict:
    return alice.get(f"sessions/{sid}/context").json()["budget"]["cache"]["last_build"]


def row(sid: str) -> PromptState:
    return PromptState.objects.get(session__external_id=sid)


def held_here(sid: str) -> bytes:
    """The chain this process built last for the session."""
    return chain._BUILT.get(Session.objects.get(external_id=sid).pk)[1]


def test_a_build_sends_the_chain_s_new_blocks_and_reads_the_chain_it_holds_not_the_row_s(
    alice, sid
):
    first = build(alice, sid)
    stored = bytes(row(sid).last_chain)
    assert stored == held_here(sid) and row(sid).chain_tag == chain.chain_tag(stored)
    alice.post(f"sessions/{sid}/messages", {"messages": tool_turn("c20", "still failing")})
    with CaptureQueriesContext(connection) as queries:
        second = build(alice, sid)
    assert second["prefix_identical_tokens"] == first["cache_write_tokens"] > 1024
    reads = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith("SELECT")]
    assert not any("last_chain" in sql for sql in reads)  # the row's tag matched: not read
    current = held_here(sid)
    assert len(current) > len(stored) and bytes(row(sid).last_chain) == current
    writes = [q["sql"] for q in queries if "last_chain" in q["sql"] and "UPDATE" in q["sql"]]
    assert len(writes) == 1 and "substr" in writes[0]
    assert current.hex() not in writes[0].lower()  # the kept blocks are not sent again
    assert row(sid).chain_tag == chain.chain_tag(current)


def test_a_build_after_another_process_s_reads_the_stored_chain(alice, sid):
    first = build(alice, sid)
    chain._BUILT.clear()  # as in a process that did not build the previous one
    chain._STORED.clear()
    alice.post(f"sessions/{sid}/messages", {"messages": tool_turn("c20", "still failing")})
    with CaptureQueriesContext(connection) as queries:
        second = build(alice, sid)
    assert any("last_chain" in q["sql"] for q in queries if "SELECT" in q["sql"])
    assert second["prefix_identical_tokens"] == first["cache_write_tokens"]
    assert bytes(row(sid).last_chain) == held_here(sid)


def test_a_build_that_raced_another_stores_no_chain_and_the_next_starts_over(
    alice, sid, monkeypatch
):
    build(alice, sid)
    real = chain.stored

    def raced(state):  # another build writes its chain right after this one read
        found = real(state)
        PromptState.objects.filter(pk=state.pk).update(last_chain=b"x" * 16, chain_tag="other:2")
        return found

    monkeypatch.setattr(chain, "stored", raced)
    monkeypatch.setattr("prompting.services.cache.stored", raced)
    alice.post(f"sessions/{sid}/messages", {"messages": tool_turn("c20", "still failing")})
    build(alice, sid)
    assert bytes(row(sid).last_chain) == b"" and row(sid).chain_tag == ""  # not a mix of both
    monkeypatch.undo()
    alice.post(f"sessions/{sid}/messages", {"messages": tool_turn("c21", "still failing")})
    again = build(alice, sid)
    assert again["prefix_identical_tokens"] == 0  # accounted as a first build
    assert bytes(row(sid).last_chain) == held_here(sid) and row(sid).chain_tag


def test_the_migration_tags_the_chains_stored_before_it(alice, sid):
    build(alice, sid)
    stored = bytes(row(sid).last_chain)
    PromptState.objects.filter(pk=row(sid).pk).update(chain_tag="")
    migration = importlib.import_module("prompting.migrations.0002_promptstate_chain_tag")
    migration.tag_stored_chains(apps, None)
    assert row(sid).chain_tag == chain.chain_tag(stored) != ""
