"""Client-view fingerprints and the unchanged prefix (``contextsvc.engine.providers.fingerprint``)."""

from __future__ import annotations

from contextsvc.engine.providers.fingerprint import (
    ClientChains,
    canonical_json,
    chain_hashes,
    chain_next,
    common_prefix,
    conversation_key,
    fingerprints,
    message_fingerprint,
)

HISTORY = [
    {"role": "user", "content": "Fix app.py"},
    {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {"p": "app.py"}}],
    },
    {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "print(1)"}],
    },
]


def test_fingerprint_is_stable_and_sensitive_to_content():
    a = message_fingerprint({"role": "user", "content": "hi"})
    assert a == message_fingerprint({"content": "hi", "role": "user"})
    assert len(a) == 64
    assert a != message_fingerprint({"role": "user", "content": "hi!"})
    assert a != message_fingerprint({"role": "assistant", "content": "hi"})


def test_reserialised_messages_keep_their_fingerprint():
    # What an SDK dump or a moved cache marker changes is not a change of history.
    assert message_fingerprint({"role": "user", "content": "hi"}) == message_fingerprint(
        {
            "role": "user",
            "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
            "name": None,
        }
    )
    compact = {
        "role": "assistant",
        "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": '{"x":1}'}}],
    }
    spaced = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": '{"x": 1}'}}],
    }
    assert message_fingerprint(compact) == message_fingerprint(spaced)


def test_non_ascii_text_is_canonical_utf8():
    assert canonical_json({"b": "é", "a": [1, None]}) == '{"a":[1,null],"b":"é"}'


def test_common_prefix_counts_unchanged_leading_messages():
    before = fingerprints(HISTORY)
    grown = fingerprints([*HISTORY, {"role": "assistant", "content": "Fixed."}])
    assert common_prefix(before, grown) == 3  # append only the new one
    assert common_prefix(before, before[:2]) == 2  # a retry without the last message
    compacted = fingerprints([{"role": "user", "content": "Summary: fixing app.py"}, *HISTORY[1:]])
    assert common_prefix(before, compacted) == 0  # the client rewrote its history
    assert common_prefix([], grown) == 0


def test_conversation_key_follows_system_and_first_user_message_only():
    key = conversation_key(agent="k1", system="Be brief.", messages=HISTORY)
    assert key == conversation_key(
        agent="k1", system="Be brief.", messages=[*HISTORY, {"role": "assistant", "content": "x"}]
    )
    assert key != conversation_key(agent="k2", system="Be brief.", messages=HISTORY)
    assert key != conversation_key(agent="k1", system="Be long.", messages=HISTORY)
    assert key != conversation_key(
        agent="k1", system="Be brief.", messages=[{"role": "user", "content": "Other"}]
    )


def test_tool_inputs_are_compared_as_they_are():
    def call(arguments):
        return {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t", "name": "w", "input": arguments}],
        }

    assert message_fingerprint(call({"x": None})) != message_fingerprint(call({}))
    assert message_fingerprint(call({"content": "a"})) != message_fingerprint(
        call({"content": [{"type": "text", "text": "a"}]})
    )


def test_chain_hashes_equal_exactly_where_the_views_share_a_prefix():
    before = chain_hashes(fingerprints(HISTORY))
    grown = chain_hashes(fingerprints([*HISTORY, {"role": "assistant", "content": "Fixed."}]))
    assert grown[: len(before)] == before  # one comparison at the end checks the whole prefix
    edited = chain_hashes(fingerprints([{"role": "user", "content": "Fix b.py"}, *HISTORY[1:]]))
    assert all(a != b for a, b in zip(before, edited, strict=True))  # a change carries forward
    assert before[-1] == chain_next(before[-2], message_fingerprint(HISTORY[-1]))


def test_client_chains_past_a_known_prefix_equal_the_full_chains():
    grown = [
        *HISTORY,
        {"role": "assistant", "content": "Fixed."},
        {"role": "user", "content": "ok"},
    ]
    full = chain_hashes(fingerprints(grown))
    chains = ClientChains(grown, len(HISTORY), full[len(HISTORY) - 1])
    assert chains._full is None  # the known messages were not fingerprinted
    assert [chains.at(n) for n in range(len(HISTORY), len(grown) + 1)] == [
        full[len(HISTORY) - 1],
        *full[len(HISTORY) :],
    ]
    assert chains.after(len(HISTORY)) == full[len(HISTORY) :]
    assert chains.at(1) == full[0] and chains.after(0) == full  # before it: computed on demand
    assert ClientChains(grown).last() == full[-1] and chains.at(0) == ""
