"""Fingerprints of the client's view of its messages, to append only what is new since its last call.

A client sends its whole history on every call. The proxy keeps one
fingerprint per message of what the client sent (and of the reply it got);
``common_prefix`` of the stored and the new list says how many leading
messages are unchanged, so only the rest is appended — and a prefix shorter
than the stored list means the client changed its history (it compacted or
edited it, or retried with other content).

A fingerprint is the sha256 of the message's canonical JSON (sorted keys, no
spaces), after the changes that do not alter what the model is shown, so a
client that re-serialises a message (its SDK's dump of a reply) is not taken
for one that edited it:

- ``null`` values and ``cache_control`` markers are dropped (SDKs dump unset
  fields as null; markers move from call to call);
- string content equals one text block of that text
  (``"hi"`` ≡ ``[{"type": "text", "text": "hi"}]``);
- tool-call ``arguments`` given as JSON text are compared parsed
  (``'{"a":1}'`` ≡ ``'{"a": 1}'``); tool inputs are otherwise compared as
  they are (a ``null`` inside them is a value).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

_DROPPED = frozenset({"cache_control"})


# Tool inputs are the model's data, compared as they are (a null there is a value).
_VERBATIM = frozenset({"input", "arguments"})


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if item is None or key in _DROPPED:
                continue
            if key in _VERBATIM:
                if isinstance(item, str):
                    try:
                        item = json.loads(item)
                    except (json.JSONDecodeError, RecursionError):
                        pass
                out[key] = item
                continue
            if key == "content" and isinstance(item, str):
                item = [{"type": "text", "text": item}]
            out[key] = _canonical(item)
        return out
    if isinstance(value, list):
        return [_canonical(item) for item in value]
    return value


def canonical_json(value: Any) -> str:
    """The canonical JSON text of a client message (module doc: what is normalised)."""
    return json.dumps(_canonical(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def message_fingerprint(message: dict[str, Any]) -> str:
    """Hex sha256 of one message's canonical JSON."""
    return hashlib.sha256(canonical_json(message).encode()).hexdigest()


def fingerprints(messages: Sequence[dict[str, Any]]) -> list[str]:
    return [message_fingerprint(m) for m in messages]


def chain_next(previous: str, fingerprint: str) -> str:
    """The chain hash of a view after the message of ``fingerprint``: sha256 of both.

    Equal chains at index i mean equal fingerprints up to i, so a client's
    whole history is checked against the stored view in one comparison.
    """
    return hashlib.sha256(f"{previous}{fingerprint}".encode()).hexdigest()


def chain_hashes(fingerprints: Sequence[str]) -> list[str]:
    """The chain hash after each fingerprint (``chain_next`` from the empty view ``""``)."""
    out: list[str] = []
    previous = ""
    for fingerprint in fingerprints:
        previous = chain_next(previous, fingerprint)
        out.append(previous)
    return out


class ClientChains:
    """The chain hashes of a client's history, computed only past a known prefix.

    ``base`` leading messages are known to have the chain ``base_chain``
    (the proxy matched them, as JSON, with the client's previous request): the chains
    after them are computed at once, the ones before only if asked for (a
    divergence, rare), by fingerprinting everything. ``at(n)`` is the chain
    of the first ``n`` messages (``""`` for none), ``after(i)`` the chains
    after each message from index ``i`` on.
    """

    def __init__(
        self, messages: Sequence[dict[str, Any]], base: int = 0, base_chain: str = ""
    ) -> None:
        self.messages = messages
        self.base = base if 0 < base <= len(messages) else 0
        self.base_chain = base_chain if self.base else ""
        self._tail: list[str] = []
        previous = self.base_chain
        for message in messages[self.base :]:
            previous = chain_next(previous, message_fingerprint(message))
            self._tail.append(previous)
        self._full: list[str] | None = None if self.base else self._tail
        self.digest = ""  # the digest of all the messages as sent, when the caller took it

    def __len__(self) -> int:
        return len(self.messages)

    def full(self) -> list[str]:
        if self._full is None:
            self._full = chain_hashes(fingerprints(self.messages))
        return self._full

    def at(self, n: int) -> str:
        if n <= 0:
            return ""
        if n == self.base:
            return self.base_chain
        if n > self.base:
            return self._tail[n - self.base - 1]
        return self.full()[n - 1]

    def after(self, start: int) -> list[str]:
        if start >= self.base:
            return self._tail[start - self.base :]
        return self.full()[start:]

    def last(self) -> str:
        return self.at(len(self.messages))


def common_prefix(previous: Sequence[str], current: Sequence[str]) -> int:
    """How many leading fingerprints the two lists share."""
    n = 0
    for a, b in zip(previous, current, strict=False):
        if a != b:
            break
        n += 1
    return n


def conversation_key(*, agent: str, system: Any, messages: Sequence[dict[str, Any]]) -> str:
    """A stable id of a conversation for a client that names no session.

    The hash of the agent, the system prompt and the first user message: every
    call of one conversation starts with those, and two conversations rarely do.
    """
    first_user = next((m for m in messages if m.get("role") == "user"), None)
    text = canonical_json({"agent": agent, "system": system, "first_user": first_user})
    return hashlib.sha256(text.encode()).hexdigest()[:32]
