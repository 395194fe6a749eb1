"""How many leading items of a list are an earlier list's very objects, counted once.

The gate reuses the parsed objects of the messages a request shares with its
conversation's previous one (``body_reuse``), and several memos rely on it:
the kept digest state (``json_prefix``), the kept chains (``chain_memo``), the
checked Responses input and its grouped units (``providers.responses_body``)
and the sent body (``upstream_json``). Each keeps the conversation's previous
list and, on the next call, counts how many leading items of the new list are
its objects. At 2,000 messages one count is about 0.3 million instructions
(a C loop, but a call per item), and a Responses call made six.

So the memos keep one frozen copy per list (``snapshot``: the same tuple for
the same list, whichever memo asks), and a count is remembered for its pair of
lists once it is known: counted, or told by whoever made the new list
(``note``: the gate knows how many messages it reused, the regrouping how many
units it kept). The memos then ask ``shared_objects`` and mostly get an answer
known already.

What this relies on is what the memos already rely on: a list the gate or a
build handed on is never changed in place (a remembered pair holds both lists,
so neither id is reused while it is kept; their lengths are checked too).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from itertools import islice
from operator import indexOf, is_
from typing import Any

from contextsvc.lru import BoundedLRU

TAIL = 32  # the pairs at the end checked one by one (``counted``)
# A few calls' worth of lists (each call makes about five): a count or a snapshot
# not found is worked out again, never wrong.
KEPT = 64
_SNAPSHOTS: BoundedLRU[int, tuple[Sequence[Any], tuple[Any, ...]]] = BoundedLRU(KEPT)
_COUNTS: BoundedLRU[tuple[int, int], tuple[Sequence[Any], Sequence[Any], int, int, int]] = (
    BoundedLRU(KEPT)
)
# The body the gate is checking (scoped: nothing holds it after).
_ACCEPTED: ContextVar[tuple[Sequence[Any], int] | None] = ContextVar("accepted", default=None)


def counted(old: Sequence[Any], new: Sequence[Any]) -> int:
    """How many leading items of ``new`` are ``old``'s own objects, counted item by item.

    Where two lists of a conversation stop sharing objects is mostly near their end
    (a moved cache marker, the newest turn): all but the last ``TAIL`` pairs are
    checked in one pass in C, the rest one by one."""
    end = min(len(old), len(new))
    head = max(end - TAIL, 0)
    if all(map(is_, islice(old, head), new)):
        for i in range(head, end):
            if old[i] is not new[i]:
                return i
        return end
    return indexOf(map(is_, old, new), False)  # an earlier difference (one there is), in C


def shared_objects(old: Sequence[Any], new: Sequence[Any]) -> int:
    """``counted(old, new)``, from what is known of the pair when it is known."""
    known = _COUNTS.get((id(old), id(new)))
    if (
        known is not None
        and known[0] is old
        and known[1] is new
        and known[2] == len(old)
        and known[3] == len(new)
    ):
        return known[4]
    count = counted(old, new)
    _COUNTS.put((id(old), id(new)), (old, new, len(old), len(new), count))
    return count


def note(old: Sequence[Any], new: Sequence[Any], count: int) -> None:
    """Tell what the maker of ``new`` knows: its first ``count`` items are ``old``'s own
    objects. Only where that is all of them, or the next item is another object (what
    ``counted`` would find); otherwise nothing is noted and a count is made when asked."""
    end = min(len(old), len(new))
    if count > end or (count < end and old[count] is new[count]):
        return
    _COUNTS.put((id(old), id(new)), (old, new, len(old), len(new), count))


@contextmanager
def accepted_within(items: Sequence[Any], count: int) -> Iterator[None]:
    """While the gate checks a body: the first ``count`` items of ``items`` are objects of
    the conversation's previous body, which passed its rules (``accepted``)."""
    token = _ACCEPTED.set((items, count))
    try:
        yield
    finally:
        _ACCEPTED.reset(token)


def accepted(items: Sequence[Any]) -> int:
    """How many leading items of ``items`` are known to have passed the gate's rules."""
    known = _ACCEPTED.get()
    return known[1] if known is not None and known[0] is items else 0


def snapshot(items: Sequence[Any]) -> tuple[Any, ...]:
    """``tuple(items)``, the same tuple whenever the same unchanged list is asked for, so
    the memos that keep a conversation's list keep one copy, and its count is shared."""
    if type(items) is tuple:
        return items
    kept = _SNAPSHOTS.get(id(items))
    if kept is not None and kept[0] is items and len(kept[1]) == len(items):
        return kept[1]
    frozen = tuple(items)
    remember(items, frozen)
    return frozen


def remember(items: Sequence[Any], frozen: tuple[Any, ...]) -> None:
    """``frozen`` is ``tuple(items)``, made by the caller: it is ``items``' snapshot."""
    _SNAPSHOTS.put(id(items), (items, frozen))
    _COUNTS.put((id(frozen), id(items)), (frozen, items, len(frozen), len(items), len(frozen)))
