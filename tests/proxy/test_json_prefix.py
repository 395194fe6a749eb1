"""The digest of a client's messages as sent, and of their prefix (``proxy.json_prefix``)."""

from __future__ import annotations

import copy

from proxy import json_prefix
from proxy.json_prefix import json_digests

HISTORY = [
    {"role": "user", "content": "Fix app.py"},
    {"role": "assistant", "content": [{"type": "text", "text": "Reading."}]},
]


def test_json_digests_name_a_prefix_as_sent_and_the_whole_in_one_pass():
    grown = [*HISTORY, {"role": "assistant", "content": "Fixed."}]
    _, whole = json_digests(HISTORY, len(HISTORY))
    prefix, grown_whole = json_digests(grown, len(HISTORY))
    assert prefix == whole != grown_whole  # the prefix of the grown list is the old list
    for known in range(len(grown) + 1):  # the cut at every place reads the same as alone
        assert json_digests(grown, known)[0] == json_digests(grown[:known], known)[1]
    reordered = [{"content": "Fix app.py", "role": "user"}, *HISTORY[1:], grown[-1]]
    assert json_digests(reordered, len(HISTORY))[0] != whole  # as sent, not as meant
    assert json_digests([{"n": 2**70}], 1) is None  # no JSON text: fingerprint everything


def long_history(n: int) -> list[dict]:
    return [{"role": "user", "content": f"step {i}", "n": i} for i in range(n)]


def fresh(messages: list[dict], known: int):
    """The digests of equal messages that are other objects (nothing kept applies)."""
    return json_digests(copy.deepcopy(messages), known)


def test_a_grown_history_of_the_same_objects_is_digested_from_the_kept_state(monkeypatch):
    monkeypatch.setattr(json_prefix, "_KEPT", type(json_prefix._KEPT)(8))
    history = long_history(json_prefix.KEPT_LEAST + 10)
    json_digests(history, 0)  # kept: the state after these objects
    grown = [*history, {"role": "assistant", "content": "done"}, {"role": "user", "content": "go"}]
    serialised = []
    real_dumps = json_prefix.orjson.dumps
    monkeypatch.setattr(
        json_prefix.orjson, "dumps", lambda v: serialised.append(v) or real_dumps(v)
    )
    assert json_digests(grown, len(history)) == fresh(grown, len(history))
    assert serialised[0] == grown[len(history) :]  # only the new messages were serialised
    again = [*grown, {"role": "user", "content": "more"}]
    assert json_digests(again, len(grown)) == fresh(again, len(grown))
    assert json_digests(again, len(again)) == fresh(again, len(again))  # nothing new


def test_other_objects_or_another_known_are_digested_whole(monkeypatch):
    monkeypatch.setattr(json_prefix, "_KEPT", type(json_prefix._KEPT)(8))
    history = long_history(json_prefix.KEPT_LEAST + 10)
    json_digests(history, 0)
    reordered = [history[0], {"n": 1, "content": "step 1", "role": "user"}, *history[2:]]
    grown = [*reordered, {"role": "user", "content": "go"}]
    assert json_digests(grown, len(history)) == fresh(grown, len(history))
    assert json_digests(grown, len(history))[0] != json_digests(history, len(history))[1]
    for known in (0, 5, len(grown)):
        assert json_digests(grown, known) == fresh(grown, known)
