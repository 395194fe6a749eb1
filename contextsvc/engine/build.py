"""The one assembler of what is sent to the model (docs/concepts/context-build.md#one-assembler).

System sections, the retain/summary pair, the history views and the tool
definitions go in; a provider request body comes out. Every format is built
from the same ``ContextParts`` so the three can never disagree about content.

Order is the cache order (docs/concepts/caching.md#breakpoints, ``engine.prompt``): tools, the
system sections base … scratchpad, the history, and last the *tail* — ``status``
sections and the service's notes — which changes on every call and so comes
after every cache breakpoint. ``anthropic``, ``openai``, ``responses`` and
``gemini`` send the history through ``engine.wellformed`` first (tool calls
paired, a user turn first), so every body is one the provider accepts; ``raw``
is the transcript view and keeps the history as stored. ``anthropic`` marks the
breakpoints of ``parts.cache`` with ``cache_control``; ``openai``, ``responses``
and ``gemini`` keep the same order without markers (their caches are automatic,
by prefix); ``raw`` reports the plan.

A ``system`` message in the history (an instruction the client placed
mid-conversation) keeps its position. ``openai`` sends it as a ``system``
message. ``anthropic`` sends it as a ``system`` message when the model takes
one (``ContextParts.mid_system``, from the model profile) and it follows a user
turn, the only place the Messages API accepts it; otherwise it becomes user
text opened by ``SYSTEM_REMINDER_HEADER``, so the model still reads it as an
instruction and the request stays valid.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .anthropic_turns import SYSTEM_REMINDER_HEADER as SYSTEM_REMINDER_HEADER  # re-exported
from .anthropic_turns import add_turn, restore_strings, strip_prefill
from .anthropic_turns import system_reminder as system_reminder
from .history_memo import HistoryMemo, converted, last_marked_turn
from .messages import Message, PromptSection, ToolDef
from .prompt import MAX_BREAKPOINTS, CachePlan, plain_concatenation, split_sections
from .providers.gemini_build import gemini_body
from .providers.history import openai_message
from .providers.openai_responses_build import message_items, responses_body
from .reasoning import drop_old_reasoning
from .summary_placement import RETAIN_HEADER as RETAIN_HEADER  # re-exported: their old home
from .summary_placement import SUMMARY_HEADER as SUMMARY_HEADER
from .summary_placement import preamble, system_summary_text
from .wellformed import is_synthetic_turn, well_formed, with_user_turn

FORMATS: tuple[str, ...] = ("anthropic", "openai", "raw", "responses", "gemini")


@dataclass(slots=True)
class ContextParts:
    model: str
    max_output_tokens: int
    sections: Sequence[PromptSection] = ()
    retain: str = ""
    summary: str = ""
    messages: Sequence[Message] = ()
    tools: Sequence[ToolDef] = ()
    # Text that changes from call to call (context status, the 80 % note, the
    # deferral note): sent in the tail, after every cache breakpoint.
    notes: Sequence[str] = ()
    # Appended as the last user text (the forced-final instruction,
    # docs/concepts/guard.md#final-turn).
    final_instruction: str | None = None
    # Where the anthropic format puts cache_control markers; None: no markers.
    cache: CachePlan | None = None
    # docs/concepts/caching.md#degradation: the sections as one plain string, in the
    # agent's order, no tail, no markers.
    plain: bool = False
    # The model takes ``system`` messages inside ``messages`` (module doc).
    mid_system: bool = True
    # "user" (docs/concepts/context-build.md#summary-placement) or "system"
    # (docs/concepts/context-build.md#summary-placement; ``engine.summary_placement``).
    summary_role: str = "user"
    # docs/concepts/compaction.md#sandwich-head: the first ``head_count`` of ``messages`` are the
    # conversation's start, sent as messages before the retain/summary (the
    # rest, the recent tail, after it). 0: the preamble comes first.
    head_count: int = 0
    # Turns (from the newest user message back) whose thinking blocks the
    # anthropic format sends; None: every turn's (``drop_old_reasoning``).
    keep_thinking_turns: int | None = None
    search_hint: bool = True  # the summary names the search tool (``engine.recall``)
    extra: dict[str, Any] = field(default_factory=dict)
    # The session's previous builds (``engine.history_memo``): the history is
    # made well-formed, and folded into Anthropic turns, only past what they did.
    memo: HistoryMemo | None = None


def build_request(fmt: str, parts: ContextParts) -> dict[str, Any]:
    if fmt == "anthropic":
        return _anthropic(parts)
    if fmt == "openai":
        return _openai(parts)
    if fmt == "raw":
        return _raw(parts)
    if fmt == "responses":
        return _responses(parts)
    if fmt == "gemini":
        return _gemini(parts)
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


def preamble_messages(parts: ContextParts) -> list[Message]:
    """``preamble`` of the parts: no summary message when it travels in the system role."""
    summary = parts.summary if parts.summary_role != "system" else ""
    return preamble(parts.retain, summary, parts.search_hint)


def _system_summary(parts: ContextParts) -> str:
    return system_summary_text(parts.summary_role, parts.summary, parts.search_hint)


def head_count_of(messages: Sequence[Message], head_end_seq: int) -> int:
    """How many of ``messages`` (seq order) are the sandwich's head (seq ≤ ``head_end_seq``).

    A bisection, not a pass: the build path stays O(log n) in the history.
    """
    if head_end_seq <= 0 or not messages:
        return 0
    return bisect_right(messages, head_end_seq, key=lambda m: m.seq or 0)


def sent_history(parts: ContextParts, *, inline_summary: bool = False) -> list[Message]:
    """Head, preamble and history as the provider formats send them (``engine.wellformed``).

    ``inline_summary``: a system-role summary after a head goes between the
    head and the tail as a ``system`` message (the sandwich's layout
    (docs/concepts/context-build.md#head-layout); OpenAI takes one anywhere) instead of at the top.
    """
    history = drop_old_reasoning(parts.messages, parts.keep_thinking_turns)
    head = min(max(parts.head_count, 0), len(history))
    middle = preamble_messages(parts)
    if inline_summary and head and (text := _system_summary(parts)):
        middle.append(Message(role="system", content=text))
    paired = parts.memo.well_formed if parts.memo is not None else well_formed
    if not head:
        return paired([*middle, *history], tools=bool(parts.tools))
    # The head ends at a turn boundary (the sandwich cuts there), so no call is
    # parted from its result by the preamble.
    return paired([*history[:head], *middle, *history[head:]], tools=bool(parts.tools))


def request_history(parts: ContextParts, *, inline_summary: bool = False) -> list[Message]:
    """``sent_history`` as a request carries it: never without a user turn (``with_user_turn``)."""
    return with_user_turn(
        sent_history(parts, inline_summary=inline_summary),
        final_instruction=bool(parts.final_instruction),
        system_summary=bool(_system_summary(parts)),
    )


@dataclass(frozen=True, slots=True)
class Layout:
    """The system sections (cacheable prefix first) and the tail texts."""

    system: list[PromptSection]
    tail: list[str]


def layout(parts: ContextParts) -> Layout:
    if parts.plain:
        text = plain_concatenation(parts.sections, parts.notes)
        system = [PromptSection(name="system", content=text, cacheable=False)] if text else []
        return Layout(system=system, tail=[])
    system, tail_sections = split_sections(parts.sections)
    tail = [s.content for s in tail_sections]
    tail.extend(note for note in parts.notes if note)
    return Layout(system=system, tail=tail)


def _plan(parts: ContextParts) -> CachePlan | None:
    plan = None if parts.plain else parts.cache
    if plan is not None and plan.count > MAX_BREAKPOINTS:
        # Anthropic rejects a request with more than 4; the planner never makes one.
        raise ValueError(f"{plan.count} cache breakpoints; at most {MAX_BREAKPOINTS} are allowed")
    return plan


# --- anthropic ---------------------------------------------------------------


def _anthropic(parts: ContextParts) -> dict[str, Any]:
    lay = layout(parts)
    plan = _plan(parts)
    history = request_history(parts)
    # ``strings``: output messages that are one history message posted as a
    # string (given back as one).
    if parts.memo is not None:
        messages, strings = parts.memo.anthropic_turns(history, mid_system=parts.mid_system)
    else:
        messages, strings = [], set()
        for msg in history:
            add_turn(messages, strings, msg, mid_system=parts.mid_system)
    strip_prefill(messages)
    marked = last_marked_turn(messages)
    if plan is not None and plan.history and marked is not None and not is_synthetic_turn(history):
        # The moving breakpoint: the newest history block, before the tail
        # (never on a mid-conversation system message: the API documents
        # cache_control on user and assistant turns; nor on a synthetic user
        # turn, gone from the next call).
        last = messages[marked]["content"]
        last[-1] = {**last[-1], "cache_control": plan.cache_control()}
    if lay.tail and messages and messages[-1]["role"] == "system":
        # The tail is user text after the history; a system message last takes
        # a user turn after it rather than moving the tail into ``system``.
        messages.append({"role": "user", "content": []})
    system: list[dict[str, Any]] = []
    for i, section in enumerate(lay.system):
        block: dict[str, Any] = {"type": "text", "text": section.content}
        if plan is not None and i in plan.system:
            block["cache_control"] = plan.cache_control()
        system.append(block)
    if summary := _system_summary(parts):
        # After the sections' breakpoints: it changes only when a compaction does.
        system.append({"type": "text", "text": summary})
    if lay.tail:
        tail = [{"type": "text", "text": text} for text in lay.tail]
        if messages and messages[-1]["role"] == "user":
            # After the moving breakpoint; text may follow tool_result blocks.
            messages[-1]["content"].extend(tail)
        else:
            # No user turn to carry it (empty history, or an assistant prefill
            # last): after the system breakpoints instead.
            system.extend(tail)
    if parts.final_instruction:
        final = {"type": "text", "text": parts.final_instruction}
        if messages and messages[-1]["role"] == "user":
            messages[-1]["content"].append(final)
        else:
            messages.append({"role": "user", "content": [final]})
    restore_strings(messages, strings)
    body: dict[str, Any] = {
        "model": parts.model,
        "max_tokens": parts.max_output_tokens,
        "system": system,
        "messages": messages,
    }
    if parts.tools:
        tools = [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in parts.tools
        ]
        if plan is not None and plan.tools:
            tools[-1]["cache_control"] = plan.cache_control()
        body["tools"] = tools
    return body


# --- openai -------------------------------------------------------------------


def _one_openai_message(msg: Message) -> tuple[dict[str, Any]]:
    return (openai_message(msg),)


def _openai(parts: ContextParts) -> dict[str, Any]:
    lay = layout(parts)
    messages: list[dict[str, Any]] = []
    # Chat Completions takes a system (or developer) message anywhere.
    history = converted(
        parts.memo, "openai", request_history(parts, inline_summary=True), _one_openai_message
    )
    system_texts = [s.content for s in lay.system]
    tail_text = "\n\n".join(lay.tail)
    if tail_text and not history:
        system_texts.append(tail_text)
        tail_text = ""
    system_text = "\n\n".join(system_texts)
    if system_text:
        messages.append({"role": "system", "content": system_text})
    summary = _system_summary(parts)
    if summary and not min(parts.head_count, len(parts.messages)):
        # With a head, ``sent_history`` places it after the head instead.
        messages.append({"role": "system", "content": summary})
    messages.extend(history)
    if tail_text:
        # Same order as anthropic: the changing text after the history, so
        # OpenAI's automatic prefix cache covers everything before it.
        messages.append({"role": "system", "content": tail_text})
    if parts.final_instruction:
        messages.append({"role": "user", "content": parts.final_instruction})
    body: dict[str, Any] = {
        "model": parts.model,
        "max_tokens": parts.max_output_tokens,
        "messages": messages,
    }
    if parts.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                },
            }
            for t in parts.tools
        ]
    return body


# --- responses ----------------------------------------------------------------


def _responses(parts: ContextParts) -> dict[str, Any]:
    """The OpenAI Responses API (``providers.openai_responses_build``), in this module's order."""
    lay = layout(parts)
    return responses_body(
        items=converted(parts.memo, "responses", request_history(parts), message_items),
        system=[s.content for s in lay.system] + [t for t in [_system_summary(parts)] if t],
        tail=lay.tail,
        final_instruction=parts.final_instruction,
        model=parts.model,
        max_output_tokens=parts.max_output_tokens,
        tools=parts.tools,
    )


# --- gemini -------------------------------------------------------------------


def _gemini(parts: ContextParts) -> dict[str, Any]:
    """The Gemini API (``providers.gemini_build``): no system role in ``contents``, so a
    history system message is marked user text, as for a model that takes none."""
    lay = layout(parts)
    history = [
        Message(role="user", content=system_reminder(m), seq=m.seq) if m.role == "system" else m
        for m in request_history(parts)
    ]
    return gemini_body(
        history=history,
        system=[s.content for s in lay.system] + [t for t in [_system_summary(parts)] if t],
        tail=lay.tail,
        final_instruction=parts.final_instruction,
        max_output_tokens=parts.max_output_tokens,
        tools=parts.tools,
    )


# --- raw ------------------------------------------------------------------------


def message_to_dict(msg: Message) -> dict[str, Any]:
    content = msg.context_text if msg.view is not None else msg.content
    out: dict[str, Any] = {"role": msg.role, "content": content}
    if msg.seq is not None:
        out["seq"] = msg.seq
    if msg.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in msg.tool_calls
        ]
    for key in ("tool_call_id", "name", "reasoning", "output_ref"):
        value = getattr(msg, key)
        if value is not None:
            out[key] = value
    out["view"] = msg.view_state
    if msg.pinned:
        out["pinned"] = True
    if msg.token_count is not None:
        out["token_count"] = msg.token_count
    return out


def _raw(parts: ContextParts) -> dict[str, Any]:
    plan = _plan(parts)
    return {
        "model": parts.model,
        "max_tokens": parts.max_output_tokens,
        "system": [
            {"name": s.name, "kind": s.kind, "cacheable": s.cacheable, "content": s.content}
            for s in parts.sections
        ],
        "notes": list(parts.notes),
        "plain": parts.plain,
        "cache_breakpoints": plan.to_dict() if plan is not None else None,
        "retain": parts.retain,
        "summary": parts.summary,
        "summary_role": parts.summary_role,
        "head_count": parts.head_count,
        "messages": [message_to_dict(m) for m in parts.messages],
        "final_instruction": parts.final_instruction,
        "tools": [
            {
                "name": t.name,
                "description": t.description,
                "input_schema": t.input_schema,
                "category": t.category,
            }
            for t in parts.tools
        ],
    }
