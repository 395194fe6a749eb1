"""The Responses dialect's bodies: the client's units, the upstream body, the reply as echoed.

A client of the Responses API sends its history as *items*; the proxy
fingerprints and syncs *units* (``openai_responses.group_units``: the items
of one transcript message — one assistant turn is reasoning, message and
calls together), so the sync, the echo rule and the divergence rule work as
for the other dialects, one unit per transcript message.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

from contextsvc.engine.providers import openai_responses
from contextsvc.engine.providers.common import Converted, Reply
from contextsvc.lru import BoundedLRU

from ..object_prefix import note, shared_objects, snapshot
from .base import place_tools
from .compaction_token import expanded_summary
from .openai_fields import responses_units

# The proxy asks upstream for this when the client reasons and the proxy stores:
# a stateless upstream returns reasoning items whole only when asked.
ENCRYPTED_REASONING = "reasoning.encrypted_content"


# A conversation's last grouping, by its first item object after the instructions: its
# next input begins with the same items (the gate reuses their parsed objects,
# ``proxy.body_reuse``), so only the units from the last one they share are grouped
# again. Kept: the input's items, how many lead as instructions, the units and where
# each starts. The units are read, never changed, after this (as the items are).
# Conversations shorter than GROUPED_LEAST items are grouped whole.
GROUPED_LEAST = 64
_Grouping = tuple[tuple[dict[str, Any], ...], int, tuple[dict[str, Any], ...], list[int]]
_GROUPED: BoundedLRU[int, _Grouping] = BoundedLRU(256)


# A conversation's last accepted input, by its first item object: the items of the next
# input that are its very objects (the gate reuses parsed objects) are not checked again.
# Every reader of a call's input (the envelope, ``client_units``, ``instruction_items``)
# asks; after the first, the answer is known (``object_prefix``).
_CHECKED: BoundedLRU[int, tuple[dict[str, Any], ...]] = BoundedLRU(256)


def input_items(body: dict[str, Any]) -> list[dict[str, Any]]:
    """``normalized_input(body)``, checking only the items past the last accepted input's."""
    value = body.get("input")
    if not isinstance(value, list) or len(value) < GROUPED_LEAST or not isinstance(value[0], dict):
        return openai_responses.normalized_input(body)
    key = id(value[0])  # alive while its entry is: the entry holds it
    previous = _CHECKED.get(key)
    checked = shared_objects(previous, value) if previous is not None else 0
    items = openai_responses.normalized_input(body, checked=checked)
    _CHECKED.put(key, snapshot(items))  # a frozen copy: the body's own list may change after
    return items


def client_units(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The conversation part of the client's input (after its leading instructions), as units."""
    items = input_items(body)
    lead = openai_responses.leading_instructions(items)
    conversation = items[lead:] if lead else items
    if len(conversation) < GROUPED_LEAST:
        return openai_responses.group_units(conversation)
    key = id(conversation[0])  # alive while its entry is: the entry holds it
    kept = _GROUPED.get(key)
    previous, shared = None, None
    if kept is not None:
        old, old_lead, units, starts = kept
        previous = (old[old_lead:] if old_lead else old, units, starts)
        if old_lead == lead:  # the count over the whole input is known already
            count = shared_objects(old, items)
            shared = count - lead if count >= lead else None
    units, starts = regrouped(conversation, previous, shared)
    _GROUPED.put(key, (snapshot(items), lead, snapshot(units), starts))
    return units


def regrouped(
    items: Sequence[dict[str, Any]],
    previous: tuple[Sequence[dict[str, Any]], Sequence[dict[str, Any]], list[int]] | None,
    shared: int | None = None,
) -> tuple[list[dict[str, Any]], list[int]]:
    """``group_units(items)`` and each unit's first item, reusing ``previous`` (its items,
    units and starts) for the units that end before the items stop being the same objects
    (``shared`` of them, counted here when not given)."""
    keep = 0
    if previous is not None:
        old, units, starts = previous
        if shared is None:
            shared = shared_objects(old, items)
        # A unit whose next unit starts inside the shared items is whole in both lists;
        # so is the last one when all are shared and the next item starts a unit of its own.
        keep = max(bisect_left(starts, shared) - 1, 0)
        if shared == len(old) and keep == len(units) - 1 and _closes(units[-1], items, shared):
            keep = len(units)
    if keep == 0:
        units, starts, at = [], [], 0
    else:
        at = starts[keep] if keep < len(starts) else len(old)
    fresh = openai_responses.group_units(items[at:])
    offsets, position = [], at
    for unit in fresh:
        offsets.append(position)
        position += len(unit["items"])
    grouped = [*units[:keep], *fresh]
    if keep:
        note(units, grouped, keep)  # the units' memos (``proxy.selectors``) ask this next
    return grouped, [*starts[:keep], *offsets]


def _closes(unit: dict[str, Any], items: Sequence[dict[str, Any]], end: int) -> bool:
    """Whether ``unit`` (the last one, ending at ``end``) is whole: no item after it joins it."""
    if end >= len(items):
        return True
    return len(openai_responses.group_units([unit["items"][-1], items[end]])) == 2


def instruction_items(body: dict[str, Any]) -> list[Any]:
    """What the conversation hash takes for "the system prompt": instructions and leading items."""
    items = input_items(body)
    return [body.get("instructions"), *items[: openai_responses.leading_instructions(items)]]


def units_to_transcript(
    units: list[dict[str, Any]], offset: int, summary: str | None = None
) -> list[dict[str, Any]]:
    """Units as transcript messages; a compaction item of ours becomes our summary's text.

    ``summary``: the session's own (in the context's preamble already, so not repeated).
    """
    responses_units(units, offset)
    return openai_responses.units_to_transcript(
        units, offset=offset, expand=lambda item: expanded_summary(item, summary)
    )


def upstream_body(converted: Converted, built: dict[str, Any], *, final: bool) -> dict[str, Any]:
    """The client's fields with instructions, input and tools replaced by the managed context.

    Upstream is called statelessly: the proxy is the store, so ``store`` is
    false and ``previous_response_id`` is resolved here, never sent.
    """
    body = dict(converted.rest)
    body.pop("previous_response_id", None)
    body.pop("conversation", None)
    # Server-side compaction is ours (``services.responses_compaction``): upstream never compacts.
    body.pop("context_management", None)
    body["store"] = False
    if converted.rest.get("reasoning") is not None:
        include = list(body.get("include") or [])
        if ENCRYPTED_REASONING not in include:
            body["include"] = [*include, ENCRYPTED_REASONING]
    body["input"] = built["input"]
    if built.get("instructions"):
        body["instructions"] = built["instructions"]
    place_tools(body, built, converted, final=final, add_extra=dict.update)
    return body


def client_message(reply: Reply, response: dict[str, Any] | None) -> dict[str, Any]:
    """The reply as the client sends it back: the unit of its output items."""
    if response is not None and isinstance(response.get("output"), list):
        return {"role": "assistant", "items": response["output"]}
    return {"role": "assistant", "items": openai_responses.items_from_transcript([reply.message])}


def strip_calls(response: dict[str, Any], names: set[str]) -> dict[str, Any]:
    """A response without the function calls of the given (built-in) tools."""
    output = [
        item
        for item in response.get("output") or ()
        if not (item.get("type") == "function_call" and item.get("name") in names)
    ]
    return {**response, "output": output}
