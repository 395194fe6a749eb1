"""Which tool results answer which tool calls: the one pairing rule of the engine.

A result answers the most recent call with its id that precedes it and is still
unanswered. A session may reuse an id once its call was answered (appends
refuse only a repeat of an open call), so an id can name several calls, one
after the other; the rule pairs each result the way the agent meant (the
nearest open call first, then the one before it, for old transcripts that
repeated an open id). A result with no such call is an orphan: its call was
cut off, or it is a second answer.

Safe cuts (``engine.turns``), the open-call floor of compaction
(``engine.strategies.cuts``) and the provider view (``engine.wellformed``) all
read this one pairing, so a compaction never splits a pair that the request
builder would send together, nor keeps one it would not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from contextsvc.engine.messages import Message

# A call: (index of its assistant message, position in that message's tool_calls).
CallKey = tuple[int, int]


@dataclass(slots=True)
class Pairing:
    """The calls and results of one history, matched."""

    # Call → index of the result answering it.
    result_of: dict[CallKey, int]
    # Result index → the call it answers (results missing here are orphans).
    call_of: dict[int, CallKey]
    # Call id → its calls still waiting for a result, oldest first (may be empty).
    waiting: dict[str, list[CallKey]]

    def open_calls(self) -> list[CallKey]:
        """Calls with no result in the history, in history order."""
        return sorted(key for keys in self.waiting.values() for key in keys)


def pair_tool_calls(messages: Sequence[Message]) -> Pairing:
    """Match every tool result to the call it answers (see the module docstring). O(n)."""
    waiting: dict[str, list[CallKey]] = {}
    result_of: dict[CallKey, int] = {}
    call_of: dict[int, CallKey] = {}
    for i, msg in enumerate(messages):
        role = msg.role
        if role == "assistant":
            for k, call in enumerate(msg.tool_calls):
                calls = waiting.get(call.id)
                if calls is None:
                    waiting[call.id] = [(i, k)]
                else:
                    calls.append((i, k))
        elif role == "tool" and msg.tool_call_id is not None:
            calls = waiting.get(msg.tool_call_id)
            if calls:
                key = calls.pop()
                result_of[key] = i
                call_of[i] = key
    return Pairing(result_of=result_of, call_of=call_of, waiting=waiting)
