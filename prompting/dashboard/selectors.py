"""The inspector's context tab: the body ``GET /context`` returns, laid out for reading.

A read: ``context_preview`` writes nothing and takes no lock, so looking at a
session does not count as a build in its cache accounting.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from prompting.context.build import context_preview, context_preview_detail
from sessions.models import Session

CONTEXT_PAGE = 25  # messages of the built body shown per page
BLOCK_CHARS = 3000


@dataclass(slots=True)
class ContextBlock:
    kind: str  # text, tool_use, tool_result, image, tool, system, ...
    label: str
    text: str
    more_chars: int
    cache: str | None  # "ephemeral", "ephemeral · 1h", ... when the block carries a breakpoint
    tokens: int | None = None
    approx: bool = False  # tokens estimated as characters / 4 (exact counts are stored per item)


@dataclass(slots=True)
class ContextMessage:
    index: int
    role: str
    blocks: list[ContextBlock]

    @property
    def has_breakpoint(self) -> bool:
        return any(b.cache for b in self.blocks)


@dataclass(slots=True)
class ContextView:
    fmt: str
    model: str
    max_tokens: int
    system: list[ContextBlock]
    tools: list[ContextBlock]
    messages: list[ContextMessage]
    total_messages: int
    start: int  # index of the first message shown
    breakpoints: list[dict[str, Any]]  # [{label, prefix_tokens}] in cache order
    budget: dict[str, Any]
    final_instruction: bool
    cache: dict[str, Any] | None = None
    deferral: dict[str, Any] | None = None
    detail: dict[str, Any] | None = None  # the per-item breakdown (as a ContextCall keeps it)


def _cut(text: str, limit: int = BLOCK_CHARS) -> tuple[str, int]:
    return (text, 0) if len(text) <= limit else (text[:limit], len(text) - limit)


def _cache_label(block: Any) -> str | None:
    if not isinstance(block, dict) or "cache_control" not in block:
        return None
    cc = block["cache_control"] or {}
    label = str(cc.get("type", "ephemeral"))
    if cc.get("ttl"):
        label += f" · {cc['ttl']}"
    return label


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def _content_blocks(content: Any) -> list[ContextBlock]:
    if content is None:
        return []
    if isinstance(content, str):
        text, more = _cut(content)
        return [ContextBlock("text", "text", text, more, None)]
    blocks = []
    for block in content:
        kind = block.get("type", "text") if isinstance(block, dict) else "text"
        if kind == "text":
            raw, label = block.get("text", ""), "text"
        elif kind == "tool_use":
            raw, label = (
                _json(block.get("input", {})),
                f"tool_use · {block.get('name')} · {block.get('id')}",
            )
        elif kind == "tool_result":
            inner = block.get("content")
            raw = inner if isinstance(inner, str) else _json(inner)
            label = f"tool_result · {block.get('tool_use_id')}"
        else:
            raw, label = _json(block), kind
        text, more = _cut(raw)
        blocks.append(ContextBlock(kind, label, text, more, _cache_label(block)))
    return blocks


def _openai_blocks(msg: dict[str, Any]) -> list[ContextBlock]:
    blocks = _content_blocks(msg.get("content"))
    if msg.get("tool_call_id"):
        for b in blocks:
            b.kind, b.label = "tool_result", f"tool · {msg['tool_call_id']}"
    for call in msg.get("tool_calls") or ():
        fn = call.get("function", {})
        text, more = _cut(fn.get("arguments", ""))
        blocks.append(
            ContextBlock(
                "tool_use", f"tool_call · {fn.get('name')} · {call.get('id')}", text, more, None
            )
        )
    return blocks


def _approx(text: str) -> int:
    return -(-len(text) // 4)


def _with_tokens(blocks: list[ContextBlock], results: dict[str, int]) -> None:
    """Each block's tokens: a tool result's exact stored count, else characters / 4
    (of the whole block, not the part displayed)."""
    for block in blocks:
        call_id = block.label.rsplit(" · ", 1)[-1] if block.kind == "tool_result" else None
        if call_id is not None and call_id in results:
            block.tokens = results[call_id]
        else:
            block.tokens, block.approx = -(-(len(block.text) + block.more_chars) // 4), True


def context_view(
    session: Session, fmt: str, *, start: int | None = None, page: int = CONTEXT_PAGE
) -> ContextView:
    """The body ``GET /context`` returns, laid out for reading.

    Built by the same assembler the API's context service uses
    (``context_preview_detail``), so what the operator reads is byte for byte
    what the agent gets; only the display is cut (long blocks, messages shown a
    page at a time). System blocks carry their section's name and tokens, tools
    their schema tokens, breakpoints their label and prefix in cache order.
    """
    body, detail = context_preview_detail(session, fmt)
    messages = body.get("messages") or []
    sections = detail["sections"]
    tool_tokens = {t["name"]: t["tokens"] for t in detail["tools"]["sent"]}
    results = detail["result_tokens"]
    system: list[ContextBlock] = []
    if fmt == "anthropic":
        for i, block in enumerate(body.get("system") or []):
            raw = block.get("text", "")
            text, more = _cut(raw)
            if i < len(sections):
                label, tokens, approx = (
                    f"system[{i}] · {sections[i]['name']}",
                    sections[i]["tokens"],
                    False,
                )
            else:
                label, tokens, approx = f"system[{i}] · status notes", _approx(raw), True
            system.append(
                ContextBlock("system", label, text, more, _cache_label(block), tokens, approx)
            )
    elif messages and messages[0].get("role") == "system":
        raw = messages[0].get("content") or ""
        text, more = _cut(raw)
        names = ", ".join(s["name"] for s in sections)
        total = sum(s["tokens"] for s in sections)
        label = f"messages[0] · system ({names})" if names else "messages[0] · system"
        system.append(
            ContextBlock("system", label, text, more, None, total or _approx(raw), not total)
        )
        messages = messages[1:]

    tools = []
    for tool in body.get("tools") or []:
        fn = tool.get("function", tool)
        schema = fn.get("input_schema", fn.get("parameters", {}))
        text, more = _cut(f"{fn.get('description', '')}\n\n{_json(schema)}")
        name = fn.get("name", "?")
        tools.append(
            ContextBlock("tool", name, text, more, _cache_label(tool), tool_tokens.get(name))
        )

    offset = (
        1
        if fmt == "openai" and body.get("messages") and body["messages"][0].get("role") == "system"
        else 0
    )
    total = len(messages)
    if start is None:
        start = max(0, total - page)
    start = min(max(0, start), total)
    shown = []
    for i, msg in enumerate(messages[start : start + page], start=start):
        blocks = _content_blocks(msg.get("content")) if fmt == "anthropic" else _openai_blocks(msg)
        _with_tokens(blocks, results)
        shown.append(ContextMessage(index=i + offset, role=msg.get("role", "?"), blocks=blocks))
    return ContextView(
        fmt=fmt,
        model=body.get("model", ""),
        max_tokens=body.get("max_tokens", 0),
        system=system,
        tools=tools,
        messages=shown,
        total_messages=total,
        start=start,
        breakpoints=detail["breakpoints"] if fmt == "anthropic" else [],
        budget=body.get("budget", {}),
        final_instruction=bool(session.status == Session.Status.FINAL),
        cache=_cache_info(body.get("budget", {})),
        deferral=_deferral_info(body.get("budget", {})),
        detail=detail,
    )


def _cache_info(budget: dict[str, Any]) -> dict[str, Any] | None:
    """This build's cache estimate (``budget.cache.last_build``), if any."""
    cache = budget.get("cache")
    if not isinstance(cache, dict):
        return None
    build = cache.get("last_build") if isinstance(cache.get("last_build"), dict) else None
    if build is None:
        return None
    marks = build.get("breakpoints") or {}
    return {
        "mode": build.get("mode"),
        "input_tokens": build.get("input_tokens") or 0,
        "read": build.get("cache_read_tokens") or 0,
        "write": build.get("cache_write_tokens") or 0,
        "uncached": build.get("uncached_input_tokens") or 0,
        "prefix_tokens": marks.get("prefix_tokens") or [],
        "ttl": marks.get("ttl") or cache.get("ttl"),
        "cost": build.get("input_cost_usd") if build.get("priced") else None,
    }


def _deferral_info(budget: dict[str, Any]) -> dict[str, Any] | None:
    deferral = budget.get("deferral")
    if not isinstance(deferral, dict) or not deferral.get("deferred_count"):
        return None
    return deferral


def context_body(session: Session, fmt: str) -> dict[str, Any]:
    """``GET /context``'s body, built without recording the build (an operator
    looking is not a call to the model)."""
    return context_preview(session, fmt)
