"""The cache accounting keys each history message once per window cache entry:
the keys it reuses are those a fresh pass computes, whatever changed."""

from __future__ import annotations

from dataclasses import replace

from contextsvc.engine.messages import Message
from prompting.services import cache

KEY = cache._message_key


def _fresh(messages):
    return [KEY(m) for m in messages], [m.token_count or 0 for m in messages]


def _window(n: int, start: int = 1) -> list[Message]:
    return [
        Message(role="user" if i % 2 else "assistant", content=f"m{i}", seq=i, token_count=i % 7)
        for i in range(start, start + n)
    ]


def test_reused_keys_equal_a_fresh_pass_after_appends_reloads_and_cuts(monkeypatch):
    pk = 10**9  # a pk no other test's session has
    calls = []
    monkeypatch.setattr(cache, "_message_key", lambda m: calls.append(m.seq) or KEY(m))

    window = _window(50)
    assert cache._history_blocks(pk, window) == _fresh(window)
    # Appends: the same objects first, only the new ones keyed.
    calls.clear()
    window = [*window, *_window(5, start=51)]
    assert cache._history_blocks(pk, window) == _fresh(window)
    assert calls == [51, 52, 53, 54, 55]
    # The window read again with nothing changed: equal objects, whose keys stand.
    calls.clear()
    again = [replace(m) for m in window]
    assert cache._history_blocks(pk, again) == _fresh(again)
    assert calls == []
    window = again
    # A reload after a trim: new objects (one with another view), all keyed again.
    reloaded = [replace(m) for m in window]
    reloaded[3] = replace(reloaded[3], view="[trimmed]", view_state="trimmed", token_count=1)
    calls.clear()
    blocks = cache._history_blocks(pk, reloaded)
    assert blocks == _fresh(reloaded) and blocks != _fresh(window)
    assert len(calls) == len(reloaded)
    # A shorter window (a compaction, a retract): nothing reused wrongly.
    shorter = reloaded[10:]
    assert cache._history_blocks(pk, shorter) == _fresh(shorter)
    assert cache._history_blocks(pk, []) == ([], [])
    cache._HISTORY.pop(pk)
