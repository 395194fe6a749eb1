"""The built-in ``tool_search`` tool (docs/concepts/deferral.md#tool-search).

Called through ``POST /api/v1/sessions/{sid}/tools/tool_search/call`` with the
arguments the model produced, ``{"query": "xcode build", "limit": 5}``. The
matches come back ranked, with their full input schemas, and are promoted into
the session's tool list for the rest of the turn (until the next user message).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.utils import timezone

from contextsvc.engine import deferral, tool_index
from contextsvc.engine.messages import ToolDef
from contextsvc.errors import ValidationFailed
from contextsvc.lru import BoundedLRU
from sessions.models import Message, Session

from .policy import deferral_inputs
from .state import BUILD_ONLY_FIELDS, locked_state
from .tools import recount_stale_index, registered_tools, search_tool_tokens

MAX_QUERY_CHARS = 1000
MAX_LIMIT = 20
DEFAULT_LIMIT = 5
# How much of the search history a session keeps for the budget to show.
RECENT_SEARCHES = 20
LOADED_KEEP = 200

# Search indexes per tool list (keyed by its digest), kept per process: an
# agent searches the same few hundred tools many times, and building the index
# costs more than a search.
_INDEXES: BoundedLRU[str, tool_index.SearchIndex] = BoundedLRU(32)


def index_for(tools_hash: str, tools: Sequence[ToolDef]) -> tool_index.SearchIndex:
    return _INDEXES.get_or_set(tools_hash, lambda: tool_index.build_index(tools))


def _parse(arguments: dict[str, Any]) -> tuple[str, int]:
    unknown = sorted(set(arguments) - {"query", "limit"})
    if unknown:
        raise ValidationFailed(
            f"tool_search: unknown argument(s) {', '.join(unknown)}; expected query and limit",
            details={"field": unknown[0]},
        )
    query = arguments.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ValidationFailed(
            "tool_search: query must be a non-empty string", details={"field": "query"}
        )
    if len(query) > MAX_QUERY_CHARS:
        raise ValidationFailed(
            f"tool_search: query must be at most {MAX_QUERY_CHARS} characters",
            details={"field": "query"},
        )
    limit = arguments.get("limit", DEFAULT_LIMIT)
    if limit is None:
        limit = DEFAULT_LIMIT
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValidationFailed(
            f"tool_search: limit must be an integer from 1 to {MAX_LIMIT}",
            details={"field": "limit"},
        )
    return query.strip(), limit


def _current_turn(session: Session, selection: dict[str, Any]) -> int:
    turn = selection.get("turn")
    if isinstance(turn, int) and turn >= 0:
        return turn
    # No build since the tools were set: look the newest user message up once.
    return (
        Message.objects.filter(session=session, role="user")
        .order_by("-seq")
        .values_list("seq", flat=True)
        .first()
        or 0
    )


def search_and_load_tools(session: Session, arguments: dict[str, Any]) -> dict[str, Any]:
    """The tool's handler (``REGISTRY`` built-in): search, and load the matches for the turn."""
    started = time.perf_counter()
    query, limit = _parse(arguments)
    with transaction.atomic():
        state = locked_state(session, defer=BUILD_ONLY_FIELDS)
        tools = registered_tools(session, state)
        tokenizer, scale, limit_tokens, _ = deferral_inputs(session)
        recounted = recount_stale_index(state, tools, tokenizer)
        tokens = {name: value[0] for name, value in state.tool_index.items()}
        search_tokens = search_tool_tokens(tokenizer.name)
        selection = state.selection or {}
        if selection.get("tools_hash") == state.tools_hash:
            deferred = list(selection.get("deferred") or [])
        else:
            deferred = deferral.choose_deferred(
                tools,
                tokens,
                state.tool_last_used or {},
                limit_tokens=limit_tokens,
                scale=scale,
                search_tool_tokens=search_tokens,
            )
        deferred_set = set(deferred)
        turn = _current_turn(session, selection)
        # With nothing deferred every tool is already sent; search them all anyway.
        candidates = deferred if deferred else [t.name for t in tools]
        hits = tool_index.search(
            index_for(state.tools_hash, tools), query, limit=limit, among=candidates
        )

        # Promote for the rest of the turn; entries of earlier turns have expired.
        loaded = {n: s for n, s in (state.loaded or {}).items() if s >= turn and n in deferred_set}
        newly: list[str] = []
        for hit in hits:
            name = hit.tool.name
            if name in deferred_set and name not in loaded:
                loaded[name] = session.last_seq
                newly.append(name)
        if len(loaded) > LOADED_KEEP:
            loaded = dict(sorted(loaded.items(), key=lambda kv: kv[1])[-LOADED_KEEP:])
        searched = dict(state.searched or {})
        for hit in hits:
            searched[hit.tool.name] = searched.get(hit.tool.name, 0) + 1
        loaded_total = dict(state.loaded_total or {})
        for name in newly:
            loaded_total[name] = loaded_total.get(name, 0) + 1
        elapsed_ms = round((time.perf_counter() - started) * 1000, 2)
        state.loaded = loaded
        state.searched = searched
        state.loaded_total = loaded_total
        state.search_count += 1
        state.recent_searches = [
            *(state.recent_searches or []),
            {
                "at": timezone.now().isoformat(),
                "seq": session.last_seq,
                "query": query,
                "matches": [h.tool.name for h in hits],
                "loaded": newly,
                "ms": elapsed_ms,
            },
        ][-RECENT_SEARCHES:]
        columns = ["loaded", "searched", "loaded_total", "search_count", "recent_searches"]
        state.save(update_fields=[*columns, "tool_index", "tools_hash"] if recounted else columns)
        # The budget's tool_descriptions follows at the next context build, which
        # is when the promoted tools are actually sent.
        remaining = len([n for n in deferred if n not in loaded])

    matches = []
    for hit in hits:
        entry = hit.to_dict()
        entry["loaded"] = hit.tool.name in deferred_set
        matches.append(entry)
    if not hits:
        message = f"No tool matches {query!r}. Try other keywords."
    elif deferred:
        message = (
            f"{len(hits)} tool(s) found; they are available for the rest of this turn: "
            + ", ".join(h.tool.name for h in hits)
        )
    else:
        message = f"{len(hits)} tool(s) found; all of them are already available."
    return {
        "query": query,
        "matches": matches,
        "loaded": newly,
        "deferred_remaining": remaining,
        "message": message,
    }
