"""The task stays verbatim above the summary: pinned messages and the retain slot.

A compaction that summarises the first user message (the task) loses its
wording, and one that rewrites the retain slot moves the cached prefix. So
the task is kept word for word in the retain slot, marked, and that slot is
never rewritten again: every later compaction leaves it as it is, and it stays
in the provider's cached prefix across compactions. What the summariser would
have put in the retain slot goes at the head of the summary instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from contextsvc.engine.messages import Message
from contextsvc.engine.strategies.base import TokenCounter
from contextsvc.engine.system_carry import split_carried
from contextsvc.engine.task_condense import condense_task

PINNED_MARK = "The task as first given (verbatim):"
# A condensed task says so: the agent must not take it for the whole wording.
CONDENSED_MARK = "The task as first given (condensed):"
# A task bigger than this share of the room for the conversation is pinned
# condensed to that share (``engine.task_condense``: its opening and closing
# lines and a line for every path, name and number it names): kept whole it
# would crowd out the work itself. A bigger share leaves the guard too little
# room (bench_policy 16k at 0.7: two calls answered 'final'). A task that
# cannot be condensed (the share too small for the notice) is summarised like
# the rest.
PIN_MAX_SHARE = 0.6


def is_pinned_retain(retain: str) -> bool:
    """Does the retain slot hold the pinned task (after any carried system block,
    which ``engine.system_carry`` puts at its top)?"""
    return split_carried(retain)[1].startswith((PINNED_MARK, CONDENSED_MARK))


def pinned_in(
    span: Sequence[Message], *, at_start: bool, counter: TokenCounter, room: int | None
) -> list[Message]:
    """The messages of ``span`` to keep verbatim: the first user message of the
    transcript (``at_start``: the span begins the session's transcript), unless
    it takes more than ``PIN_MAX_SHARE`` of ``room``."""
    if not at_start:
        return []
    first = next((m for m in span if m.role == "user"), None)
    if first is None or not first.context_text.strip():
        return []
    if room is not None and counter.message(first) > PIN_MAX_SHARE * room:
        if _cut_task(first, counter, room) is None:
            return []
    return [first]


def _cut_task(msg: Message, counter: TokenCounter, room: int) -> str | None:
    """The task condensed to its share of ``room``; None when it fits as it is
    (or cannot be condensed)."""
    return _condensed(msg.context_text, int(PIN_MAX_SHARE * room), counter)


@lru_cache(maxsize=4)
def _condensed(text: str, max_tokens: int, counter: TokenCounter) -> str | None:
    # A compaction asks twice, once to decide the task stays (``pinned_in``) and
    # once for its text (``pinned_retain``): condensing a big task is the costly
    # part (~170 ms for 0.9 MB), so it runs once.
    return condense_task(text, max_tokens, counter.text)


def pinned_retain(
    pinned: Sequence[Message], counter: TokenCounter | None = None, room: int | None = None
) -> str:
    """The retain slot holding the pinned task (condensed when it is over
    ``PIN_MAX_SHARE`` of ``room``)."""
    texts, condensed = [], False
    for m in pinned:
        cut = _cut_task(m, counter, room) if counter is not None and room is not None else None
        texts.append(cut or m.context_text)
        condensed = condensed or cut is not None
    return "\n\n".join([CONDENSED_MARK if condensed else PINNED_MARK, *texts])


AGENT_PIN_MARK = "[Pinned by the agent (verbatim):]"


def agent_pinned(span: Sequence[Message]) -> list[Message]:
    """The messages of ``span`` the agent pinned (``"pinned": true`` on append)."""
    return [m for m in span if m.pinned and m.context_text.strip()]


def with_agent_pins(retain: str, pinned: Sequence[Message]) -> str:
    """``retain`` with the agent's pinned messages appended, each verbatim and
    marked: the slot is above the summary and only grows, so what was pinned
    earlier stays in the cached prefix."""
    blocks = [f"{AGENT_PIN_MARK}\n{m.context_text}" for m in pinned]
    return "\n\n".join([retain, *blocks] if retain else blocks)
