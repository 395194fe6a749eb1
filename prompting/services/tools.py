"""The session's registered tools: token counts and digests, the parsed-list cache,
and what PUT tools records for deferral (docs/concepts/deferral.md#deferral-threshold)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from contextsvc.engine import caching, deferral
from contextsvc.engine.messages import ToolDef
from contextsvc.engine.tokens import Tokenizer, compact_json, estimate_tool_def, get_tokenizer
from contextsvc.lru import BoundedLRU
from sessions import accounting
from sessions.models import Session

from ..models import PromptState
from .policy import deferral_inputs, deferral_note_style
from .state import BUILD_ONLY_FIELDS, locked_state

log = logging.getLogger("contextsvc.prompting")


@lru_cache(maxsize=16)
def search_tool_tokens(tokenizer_name: str) -> int:
    """Tokens of the built-in tool_search definition, per tokenizer."""
    return estimate_tool_def(deferral.TOOL_SEARCH, get_tokenizer(tokenizer_name))


def tool_digest(tool: ToolDef) -> str:
    return caching.block_key(
        tool.name,
        tool.description,
        compact_json(tool.input_schema),
        tool.category,
        # The hint is searched, so a new one must rebuild the search index
        # (no hint: the digest stays what it was before hints existed).
        *((tool.search_hint,) if tool.search_hint else ()),
    ).hex()


def list_digest(tools: Sequence[ToolDef], digests: dict[str, str] | None = None) -> str:
    """A digest of the whole tool list, order included."""
    return caching.block_key(
        *(f"{t.name}:{digests[t.name] if digests else tool_digest(t)}" for t in tools)
    ).hex()


def index_tools(tools: Sequence[ToolDef], tokenizer: Tokenizer) -> tuple[dict[str, list], str]:
    """Per-tool ``[tokens, digest]`` and the digest of the whole list."""
    index: dict[str, list] = {}
    for tool in tools:
        index[tool.name] = [estimate_tool_def(tool, tokenizer), tool_digest(tool)]
    return index, list_digest(tools, {name: value[1] for name, value in index.items()})


def recount_stale_index(state: PromptState, tools: Sequence[ToolDef], tokenizer: Tokenizer) -> bool:
    """Count the tools into ``state`` (in memory) when its index does not cover them:
    tools stored before the state existed, or a lost write. True when it did;
    the caller saves ``tool_index`` and ``tools_hash`` if it records."""
    index = state.tool_index or {}
    if len(index) == len(tools) and all(t.name in index for t in tools):
        return False
    state.tool_index, state.tools_hash = index_tools(tools, tokenizer)
    return True


# Parsed tool lists by the digest session_set_tools stored (``state.tools_hash``).
_TOOLSETS: BoundedLRU[str, tuple[ToolDef, ...]] = BoundedLRU(32)


def registered_tools(session: Session, state: PromptState | None = None) -> list[ToolDef]:
    """The session's tool definitions as ToolDefs.

    The context endpoint and tool_search load the session with ``tools``
    deferred: 300 MCP tools are a megabyte of JSON, 10–20 ms to fetch and
    parse on every request. The parsed list is kept per process under the
    digest ``session_set_tools`` stored (``state.tools_hash``).
    """
    if "tools" not in session.get_deferred_fields():
        return [ToolDef(**t) for t in session.tools or ()]
    if state is not None and state.tools_hash:
        cached = _TOOLSETS.get(state.tools_hash)
        if cached is not None:
            return list(cached)
    raw = Session.objects.filter(pk=session.pk).values_list("tools", flat=True).first() or []
    tools = [ToolDef(**t) for t in raw]
    if state is not None and state.tools_hash:
        # Keyed by the digest of what was actually read: a PUT tools that
        # committed between reading the state and the tools is not mislabelled.
        digest = list_digest(tools)
        if digest == state.tools_hash:
            _TOOLSETS.put(digest, tuple(tools))
    return tools


def selection_record(
    *, turn: int, tools_hash: str, limit: int, scale: float, deferred: list[str]
) -> dict[str, Any]:
    """The frozen deferral choice kept in ``state.selection``."""
    return {
        "turn": turn,
        "tools_hash": tools_hash,
        "limit": limit,
        "scale": scale,
        "deferred": deferred,
    }


def record_registered_tools(session: Session, tools: list[ToolDef]) -> int | None:
    """``REGISTRY.tool_deferral``: runs inside ``session_set_tools``'s transaction
    (session row locked) and writes the tool index and a first selection.

    Counts each tool once (the build never re-tokenizes schemas), chooses what
    to defer and returns the scaled tokens of what will be sent — the budget's
    ``tool_descriptions``. None when that fails: the caller then counts every
    tool, as before deferral existed (docs/concepts/caching.md#degradation).
    """
    try:
        tokenizer, scale, limit, _ = deferral_inputs(session)
        index, tools_hash = index_tools(tools, tokenizer)
        state = locked_state(session, defer=BUILD_ONLY_FIELDS)
        tokens = {name: value[0] for name, value in index.items()}
        search_tokens = search_tool_tokens(tokenizer.name)
        style = deferral_note_style(session)
        uncounted = accounting.uncounted_tools(session)
        deferred = deferral.choose_deferred(
            tools,
            tokens,
            state.tool_last_used or {},
            limit_tokens=limit,
            scale=scale,
            search_tool_tokens=search_tokens,
            note_style=style,
            uncounted=uncounted,
        )
        # turn -1: the next build re-chooses with the LRU it learns then.
        state.tool_index = index
        state.tools_hash = tools_hash
        state.selection = selection_record(
            turn=-1, tools_hash=tools_hash, limit=limit, scale=scale, deferred=deferred
        )
        state.save(update_fields=["tool_index", "tools_hash", "selection"])
        _TOOLSETS.put(tools_hash, tuple(tools))
        chosen = deferral.assemble(
            tools,
            tokens,
            deferred,
            (),
            scale=scale,
            search_tool_tokens=search_tokens,
            note_style=style,
            uncounted=uncounted,
        )
        return chosen.tokens_sent
    except Exception:
        log.exception(
            "tool deferral failed while registering tools for session %s", session.external_id
        )
        return None
