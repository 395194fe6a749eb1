"""A posted batch made ready outside the session lock: converted, stored, counted.

Tokenizing is the slow part of an append, so it happens here, before
``session_append_messages`` takes the row lock (healthchecks' ``Check.ping``),
and it is bounded per request (``CONTEXTSVC_EXACT_TOKEN_CHARS``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from contextsvc import nul
from contextsvc.engine.builtin_results import builtin_result_view, ref_read
from contextsvc.engine.messages import Message as EngineMessage
from contextsvc.engine.messages import ToolCall, content_text
from contextsvc.engine.output_sources import stored_text, whole_view_config
from contextsvc.engine.output_views import GREP_TOOL, READ_TOOL, ViewConfig
from contextsvc.engine.token_estimate import count_message
from contextsvc.errors import ValidationFailed
from sessions import accounting
from sessions.extensions import REGISTRY
from sessions.models import Session
from sessions.outputs.budget import cache_config
from sessions.outputs.ingest import output_for_message
from sessions.outputs.store import PendingOutput, output_info, output_touch, ref_dict
from sessions.selectors import tool_call_arguments

from .inputs import MessageData


@dataclass(slots=True)
class Prepared:
    """A posted message made ready outside the lock: converted and counted."""

    message: EngineMessage
    row: dict[str, Any]
    # Tool results: the stored output (docs/concepts/trimming.md#output-ref) and its info
    # for a failure view decided under the lock.
    ref: dict[str, Any] | None = None
    info: Any = None
    pending: Any = None  # a small output to insert under the lock


def to_engine_message(data: MessageData) -> EngineMessage:
    """The engine's message for a posted one (tool-call arguments default to ``{}``)."""
    return EngineMessage(
        role=data["role"],
        content=data.get("content") or "",
        tool_calls=tuple(
            ToolCall(id=c["id"], name=c["name"], arguments=c.get("arguments") or {})
            for c in data.get("tool_calls") or ()
        ),
        tool_call_id=data.get("tool_call_id"),
        name=data.get("name"),
        reasoning=data.get("reasoning"),
        output_ref=data.get("output_ref"),
        pinned=bool(data.get("pinned")),
    )


def _view_config(cache: ViewConfig, text: str, nul_bytes: bool) -> ViewConfig:
    """The view config of one stored tool result (a built-in's is not stored: ``_builtin_result``)."""
    if nul_bytes:  # the cache is off: the output is stored, never cut
        return whole_view_config(cache, text)
    return cache


def is_builtin_result(session: Session, tool_name: str) -> bool:
    """A result of a call to a built-in tool (``REGISTRY.tools``) the session's client
    does not define under the same name itself."""
    if tool_name not in REGISTRY.tools:
        return False
    return not any(
        t.get("name") == tool_name and t.get("category") != "builtin"
        for t in session.tools or ()
        if isinstance(t, dict)
    )


def _session_ref(session: Session, ref: str | None) -> str | None:
    """``ref`` when it is a stored output of this session, touched as any ref a message
    takes up; None otherwise (a read of another session's output points nowhere)."""
    if not ref:
        return None
    try:
        return output_touch(session=session, ref=ref).ref
    except ValidationFailed:
        return None


def _builtin_result(
    session: Session,
    msg: EngineMessage,
    tool_name: str,
    cache: ViewConfig,
    arguments: dict[str, Any] | None,
) -> None:
    """A built-in's result stays in its message, pointing into the ref it read (no new
    output, no new ref: a grep of a grep cannot happen), its view cut like any other's.

    The ref is the result's own ``ref_id``; an agent that posts only a page's
    text has its call's ``ref_id`` (``arguments``: the call's, when in this batch).
    """
    text = stored_text(msg.content)
    ref = ref_read(tool_name, text)
    if ref is None and tool_name in (READ_TOOL, GREP_TOOL):
        if arguments is None:
            arguments = tool_call_arguments(session, msg.tool_call_id or "")
        ref = arguments.get("ref_id") if isinstance(arguments.get("ref_id"), str) else None
    msg.output_ref = _session_ref(session, ref)
    view = builtin_result_view(text, tool_name, msg.output_ref, cache)
    msg.view = view.text
    msg.view_state = view.state


def prepare_messages_storing_outputs(
    session: Session, messages: Sequence[MessageData]
) -> list[Prepared]:
    """Convert and count each message of a batch; writes its tool outputs
    (docs/concepts/trimming.md#stored-in-full).

    Large outputs are stored here, outside the session lock; small ones are
    left pending for the append to insert under the lock.
    """
    tokenizer = accounting.tokenizer_of(session)
    config = accounting.estimate_config_of(session)
    cache = cache_config(session)
    # Tool names for outputs (the lock-side match fills Message.name the same way).
    open_calls = dict(session.open_tool_calls or {})
    batch_arguments: dict[str, dict[str, Any]] = {}  # calls of this batch: their arguments
    pending: dict[str, PendingOutput] = {}
    prepared = []
    # Tokenizing is bounded per request, whatever the texts: past this many
    # characters counted exactly, a message gets a bounded estimate and an exact
    # count off the request path (``exact_counts``).
    exact_left = settings.CONTEXTSVC_EXACT_TOKEN_CHARS
    for i, data in enumerate(messages):
        msg = to_engine_message(data)
        for call in msg.tool_calls:
            open_calls[call.id] = call.name
            batch_arguments[call.id] = call.arguments
        stored = None
        # A NUL in a tool output is data: its bytes go to the output store even
        # with the cache off (text columns cannot hold it), the view shows it escaped.
        nul_bytes = msg.role == "tool" and not cache.enabled and nul.NUL in msg.text
        tool_name = msg.name or open_calls.get(msg.tool_call_id or "", "")
        if (
            msg.role == "tool"
            and not msg.output_ref
            and nul.NUL not in msg.text
            and is_builtin_result(session, tool_name)
        ):
            arguments = batch_arguments.get(msg.tool_call_id or "")
            _builtin_result(session, msg, tool_name, cache, arguments)
        elif msg.role == "tool" and (cache.enabled or msg.output_ref or nul_bytes):
            # docs/concepts/trimming.md#stored-in-full: store the full output, put its view in
            # context. Only the view is tokenized; the blob is never (DESIGN.md).
            if msg.output_ref and msg.text:
                raise ValidationFailed(
                    f"messages[{i}]: a tool message carries content or output_ref, not both",
                    details={"field": f"messages.{i}.output_ref"},
                )
            # Media parts leave a placeholder in the stored text: a cut view or a
            # read of the ref still shows an image was there.
            text = stored_text(msg.content)
            stored = output_for_message(
                session=session,
                config=_view_config(cache, text, nul_bytes),
                text=None if msg.output_ref else text,
                output_ref=msg.output_ref,
                tool_name=tool_name,
                field_name=f"messages.{i}.output_ref",
                pending=pending,
            )
            msg.output_ref = stored.output.ref
            msg.view = stored.view.text
            msg.view_state = stored.view.state
            if stored.content is not None:
                msg.content = stored.content
        if msg.role == "tool":
            msg.content = nul.escape_content(msg.content)
            if msg.view is not None:
                msg.view = nul.escape(msg.view)
        counted = count_message(msg, tokenizer, config, exact_chars=exact_left)
        exact_left = max(0, exact_left - counted.exact_chars)
        msg.token_count = counted.tokens
        content = msg.content
        if stored is not None and msg.view is not None:
            # The output lives in its ToolOutput; the row keeps only media parts.
            media: list[dict[str, Any]] = []
            if isinstance(content, list):
                media = [part for part in content if part.get("type", "text") != "text"]
            content = media or ""
        prepared.append(
            Prepared(
                message=msg,
                row={
                    "role": msg.role,
                    "content": content if isinstance(content, str) else content_text(content),
                    "parts": content if isinstance(content, list) else None,
                    "tool_calls": [
                        {"id": c.id, "name": c.name, "arguments": c.arguments}
                        for c in msg.tool_calls
                    ],
                    "tool_call_id": msg.tool_call_id,
                    "name": msg.name,
                    "reasoning": msg.reasoning,
                    "output_ref": msg.output_ref,
                    "view": msg.view,
                    "view_state": msg.view_state,
                    "token_count": msg.token_count,
                    "token_count_estimated": counted.estimated,
                    "pinned": msg.pinned,
                },
                ref=ref_dict(stored.output) if stored else None,
                info=output_info(stored.output, msg.name) if stored else None,
                pending=stored.pending if stored else None,
            )
        )
    return prepared
