"""The digest of a client's messages as sent, and of their prefix (``proxy.json_prefix``)."""

from __future__ import annotations

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
