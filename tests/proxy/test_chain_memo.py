"""A moved cache marker costs the fingerprints of the messages after it, not of the whole
history (``proxy.chain_memo``): the chains always equal a fingerprint of every message."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

from contextsvc.engine.providers import fingerprint
from contextsvc.engine.providers.fingerprint import ClientChains
from proxy import chain_memo
from proxy.json_prefix import json_digests
from proxy.selectors import client_chains


def claude_code_history(n: int) -> list[dict]:
    """Turns as Claude Code sends them: its newest message carries the cache marker."""
    out = [{"role": "user" if i % 2 == 0 else "assistant", "content": [{"type": "text", "text": f"m{i}"}]} for i in range(n)]  # fmt: skip
    out[-1] = copy.deepcopy(out[-1])
    out[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return out


def next_request(previous: list[dict], new: int) -> list[dict]:
    """The next request as the gate hands it over: the previous one's objects, except the
    message that lost its marker (parsed again), then the new messages."""
    unmarked = copy.deepcopy(previous[-1])
    del unmarked["content"][-1]["cache_control"]
    grown = [*previous[:-1], unmarked]
    for i in range(new):
        grown.append({"role": "user" if (len(grown) % 2 == 0) else "assistant", "content": f"n{i}"})
    grown[-1] = {
        **grown[-1],
        "content": [{"type": "text", "text": "newest", "cache_control": {"type": "ephemeral"}}],
    }
    return grown


@pytest.fixture
def counted(monkeypatch):
    monkeypatch.setattr(chain_memo, "_KEPT", type(chain_memo._KEPT)(8))
    calls = []
    real = fingerprint.message_fingerprint

    def counting(message):
        calls.append(message)
        return real(message)

    monkeypatch.setattr(fingerprint, "message_fingerprint", counting)
    return calls


def test_a_moved_marker_fingerprints_only_the_messages_from_it_on(counted):
    history = claude_code_history(chain_memo.LEAST + 20)
    first = client_chains(None, history)
    assert len(counted) == len(history)  # a first call: every message
    counted.clear()
    grown = next_request(history, 2)
    chains = client_chains(None, grown)
    assert len(counted) == 3  # the unmarked message and the two new ones
    fresh = ClientChains(copy.deepcopy(grown))
    assert chains.after(0) == fresh.full() and chains.last() == fresh.last()
    assert chains.at(len(history) - 1) == first.at(len(history) - 1)


def test_other_objects_or_an_early_edit_fingerprint_everything(counted):
    history = claude_code_history(chain_memo.LEAST + 20)
    client_chains(None, history)
    counted.clear()
    edited = [*history[:10], {"role": "assistant", "content": "edited"}, *history[11:]]
    chains = client_chains(None, edited)  # before the kept newest ones: all again
    assert len(counted) == len(edited)
    assert chains.last() == ClientChains(copy.deepcopy(edited)).last()
    counted.clear()
    client_chains(None, copy.deepcopy(edited))  # equal messages, other objects
    assert len(counted) == len(edited)


def test_a_short_history_is_not_kept(counted):
    history = claude_code_history(chain_memo.LEAST - 1)
    client_chains(None, history)
    counted.clear()
    client_chains(None, next_request(history, 1))
    assert len(counted) == len(history) + 1


def test_a_history_that_only_grew_keeps_its_digest_for_the_view(counted):
    history = [{"role": "user", "content": f"m{i}"} for i in range(chain_memo.LEAST + 4)]
    first = client_chains(None, history)
    view = SimpleNamespace(raw_count=len(history), raw_digest=first.digest, raw_chain=first.last())
    grown = [*history, {"role": "assistant", "content": "done"}]
    counted.clear()
    chains = client_chains(view, grown)
    assert len(counted) == 1
    assert chains.digest == json_digests(copy.deepcopy(grown), 0)[1] != ""
    # The newest message parsed again (its marker moved): no digest of the whole is taken.
    changed = [*grown[:-1], copy.deepcopy(grown[-1]), {"role": "user", "content": "next"}]
    moved = client_chains(view, changed)
    assert moved.digest == "" and moved.last() == ClientChains(copy.deepcopy(changed)).last()
