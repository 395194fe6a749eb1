"""The record of a context build (``ContextCall``): the per-item breakdown of
what was sent, computed from the parts the assembler used, and its one INSERT.

The breakdown is a pure function of the build (``call_breakdown``), so the
inspector's context tab shows the same names and figures for a preview as the
record keeps for a real call.
"""

from __future__ import annotations

import logging
from typing import Any

from django.utils import timezone

from contextsvc.engine.build import ContextParts, layout
from contextsvc.engine.messages import ToolDef
from contextsvc.engine.window_stats import WindowStats, seq_ranges, window_stats
from sessions import accounting
from sessions.models import Session
from sessions.services.calls import context_call_insert

from .sections import PromptPlan, count_text
from .selection import ToolPlan

log = logging.getLogger("contextsvc.prompting")


def tool_server(tool: ToolDef) -> str:
    """Where a tool comes from: the MCP server of an ``mcp__server__tool`` name (``mcp:server``),
    else its category (``client`` for the agent's own tools sent through the proxy)."""
    if tool.name.startswith("mcp__"):
        server = tool.name[5:].split("__", 1)[0]
        return f"mcp:{server}" if server else "mcp"
    return tool.category or "builtin"


def _tools(parts: ContextParts, tool_plan: ToolPlan, tokenizer: Any) -> dict[str, Any]:
    sent_names = {t.name for t in parts.tools}
    loaded = set(tool_plan.selection.loaded) if tool_plan.selection is not None else set()
    servers: dict[str, dict[str, int]] = {}
    sent, deferred = [], []
    for tool in parts.tools:
        tokens = tool_plan.tokens.get(tool.name)
        if tokens is None:
            tokens = count_text(tool.description, tokenizer) + count_text(
                str(tool.input_schema), tokenizer
            )
        server = tool_server(tool)
        sent.append({"name": tool.name, "server": server, "tokens": tokens})
        servers.setdefault(server, {"sent": 0, "deferred": 0})["sent"] += tokens
    for tool in tool_plan.registered:
        if tool.name in sent_names:
            continue
        tokens = tool_plan.tokens.get(tool.name, 0)
        server = tool_server(tool)
        deferred.append({"name": tool.name, "server": server, "tokens": tokens})
        servers.setdefault(server, {"sent": 0, "deferred": 0})["deferred"] += tokens
    return {
        "sent": sent,
        "deferred": deferred,
        "loaded": sorted(loaded & sent_names),
        "sent_tokens": sum(t["tokens"] for t in sent),
        "deferred_tokens": sum(t["tokens"] for t in deferred),
        "servers": servers,
    }


def call_breakdown(
    session: Session,
    parts: ContextParts,
    tool_plan: ToolPlan,
    prompt_plan: PromptPlan,
    stats: WindowStats | None = None,
) -> dict[str, Any]:
    """Per item, as sent: named system sections, each tool's schema tokens
    (sent or deferred, per MCP server), the largest messages, and the trimmed,
    cut or cleared placeholders counted together.

    ``stats`` are the window's figures as the window cache keeps them
    (``sessions.selectors.context_window``): with them the breakdown reads no
    message but the largest, whatever the window's length; without them (or
    for another window) they are computed here in one pass.
    """
    tokenizer = accounting.tokenizer_of(session)
    lay = layout(parts)
    sections = []
    for i, section in enumerate(lay.system):
        if not prompt_plan.plain and i < len(prompt_plan.system_tokens):
            tokens = prompt_plan.system_tokens[i]
        else:
            tokens = count_text(section.content, tokenizer)
        sections.append({"name": section.name, "kind": section.kind, "tokens": tokens})
    if stats is None or stats.count != len(parts.messages):
        stats = window_stats(parts.messages)
    return {
        "sections": sections,
        "tail_tokens": sum(count_text(t, tokenizer) for t in lay.tail),
        # Per message, as runs of seqs: what went whole, as a view, or not at all.
        "sent": {**seq_ranges(stats.runs), "window": _window(session)},
        "added": _added(parts, lay.tail, session),
        "tools": _tools(parts, tool_plan, tokenizer),
        "largest": [
            {
                "seq": m.seq,
                "role": m.role,
                "name": m.name or "",
                "tokens": m.token_count or 0,
                "view_state": m.view_state,
            }
            for m in stats.largest_messages
        ],
        "outputs_tokens": stats.outputs_tokens,
        "placeholders": {
            "count": sum(n for _, n, _ in stats.placeholders),
            "tokens": sum(t for _, _, t in stats.placeholders),
            "by_state": {k: {"count": n, "tokens": t} for k, n, t in stats.placeholders},
        },
    }


def _window(session: Session) -> dict[str, int]:
    """The live window's bounds: seqs before ``start_seq`` and past the head went into
    the summary (or, with none, out of the context)."""
    return {
        "start_seq": session.window_start_seq,
        "head_end_seq": session.head_end_seq,
        "last_seq": session.last_seq,
    }


NOTE_CHARS = 400  # of a note, kept in the record


def _added(parts: ContextParts, tail: list[str], session: Session) -> list[dict[str, Any]]:
    """What the service put in that no message of the transcript holds: the summary,
    the retained text, the notes after the last item, the final-turn instruction."""
    added: list[dict[str, Any]] = []
    if parts.summary:
        added.append(
            {"what": "summary", "tokens": session.summary_tokens, "role": parts.summary_role}
        )
    if parts.retain:
        added.append({"what": "retain", "chars": len(parts.retain)})
    added.extend({"what": "note", "text": text[:NOTE_CHARS]} for text in tail)
    if parts.final_instruction:
        added.append({"what": "final_instruction", "text": parts.final_instruction[:NOTE_CHARS]})
    return added


def breakpoint_labels(
    parts: ContextParts, prompt_plan: PromptPlan, sections: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Each cache breakpoint with its prefix, in the provider's cache order
    (tools, system sections, history) — the order of ``prefix_tokens``."""
    plan = None if prompt_plan.plain else prompt_plan.cache
    if plan is None:
        return []
    labels: list[str] = []
    if plan.tools and parts.tools:
        labels.append(f"tools (last: {parts.tools[-1].name})")
    for i in plan.system:
        name = sections[i]["name"] if i < len(sections) else f"system[{i}]"
        labels.append(f"system · {name}")
    if plan.history and parts.messages:
        labels.append(f"history (through #{parts.messages[-1].seq})")
    prefixes = list(plan.prefix_tokens)
    return [
        {"label": label, "prefix_tokens": prefixes[i] if i < len(prefixes) else None}
        for i, label in enumerate(labels)
    ]


def context_call_record(
    *,
    session: Session,
    source: str,
    fmt: str,
    parts: ContextParts,
    tool_plan: ToolPlan,
    prompt_plan: PromptPlan,
    budget: dict[str, Any],
    record: dict[str, Any] | None,
    build_ms: float,
    stats: WindowStats | None = None,
    request: dict[str, Any] | None = None,
) -> int | None:
    """Insert the build's record (one INSERT); its id (None if unknown or not written).
    Never raises: a build is not refused because its record could not be written
    (docs/concepts/caching.md#degradation)."""
    try:
        breakdown = call_breakdown(session, parts, tool_plan, prompt_plan, stats)
        components = dict(budget.get("components") or {})
        components["outputs"] = breakdown["outputs_tokens"]
        profile = prompt_plan.profile
        prices = dict(profile.prices) if profile is not None and profile.prices else None
        if prices is not None:
            prices["ttl"] = prompt_plan.policy.ttl
            # Kept with the prices: the call's cost stays in the prices of its build,
            # and the dashboard says which profile set them (docs/dashboard.md#models-and-prices).
            prices["source"] = profile.price_source
        record = record or {}
        # The cache accounting's input: tool schemas unscaled, as a provider counts them.
        breakdown["sent_input_tokens"] = record.get("input_tokens")
        priced = bool(record.get("priced"))
        messages = parts.messages
        return context_call_insert(
            {
                "session_id": session.pk,
                "source": source,
                "format": fmt,
                "model": session.model,
                "first_seq": (messages[0].seq or 0) if messages else 0,
                "through_seq": (messages[-1].seq or 0) if messages else 0,
                "message_count": len(messages),
                "guard_status": budget["guard"]["status"],
                "effective_window": budget.get("effective_window") or 0,
                "compact_at": (budget.get("thresholds") or {}).get("compact_at") or 0,
                "estimated_input": budget.get("used") or 0,
                "components": components,
                "breakdown": breakdown,
                "breakpoints": breakpoint_labels(parts, prompt_plan, breakdown["sections"]),
                "cache_read_estimated": record.get("cache_read_tokens") or 0,
                "cache_write_estimated": record.get("cache_write_tokens") or 0,
                "prices": prices,
                "cost_usd": record.get("input_cost_usd") if priced else None,
                "cost_without_cache_usd": (
                    record.get("input_cost_without_cache_usd") if priced else None
                ),
                "build_ms": round(build_ms, 3),
                "created_at": timezone.now(),
                "request": request,
            }
        )
    except Exception:
        log.exception("could not record the context call of session %s", session.external_id)
        return None
