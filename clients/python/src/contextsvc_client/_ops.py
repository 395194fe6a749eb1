"""Every operation once: its signature, its docs, the call it sends and how its answer is read.

:class:`ClientOps` and :class:`SessionOps` are the public methods of both
clients. A subclass supplies only ``_run(call, parse)``: the sync client sends
the call and returns ``parse(answer)``; the async one returns a coroutine of
it. So ``Client.context()`` is the body and ``AsyncSession.context()`` is
awaited for it, from the same method (the command-mixin shape of redis-py).
The type parameters name what each kind of method hands back, so either
client stays precisely typed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from ._core import (
    Call,
    ContextFormat,
    ContextPurpose,
    Json,
    MessageFormat,
    UploadData,
    append_call,
    budget_call,
    call_call,
    calls_call,
    compact_call,
    context_call,
    create_session_call,
    delete_session_call,
    get_session_call,
    grep_ref_call,
    list_sessions_call,
    read_ref_call,
    retract_call,
    set_system_call,
    set_tools_call,
    snapshot_call,
    upload_output_call,
    usage_call,
    usage_fields,
)

# What a method hands back: the value itself (sync) or a coroutine of it (async).
JsonR = TypeVar("JsonR")
NoneR = TypeVar("NoneR")
SessionR = TypeVar("SessionR")
SessionT = TypeVar("SessionT")
ClientT = TypeVar("ClientT", bound="ClientOps[Any, Any, Any, Any]")


def _as_json(answer: Any) -> Json:
    return answer


def _as_nothing(answer: Any) -> None:
    return None


class RefOps(Generic[JsonR]):
    """Reading stored tool outputs by ref: on the client, and on a session for convenience."""

    def _run(self, call: Call, parse: Callable[[Any], Any]) -> Any:
        """Send ``call`` and hand back ``parse(answer)`` (or a coroutine of it)."""
        raise NotImplementedError

    def read_ref(
        self, ref: str, *, offset: int = 1, limit: int = 100, max_line_length: int | None = None
    ) -> JsonR:
        """Lines ``offset``… (1-based) of a stored output: ``text``, ``total_lines``, ``has_more``."""
        call = read_ref_call(ref, offset=offset, limit=limit, max_line_length=max_line_length)
        return self._run(call, _as_json)

    def grep_ref(
        self,
        ref: str,
        pattern: str,
        *,
        context: int = 0,
        max_matches: int = 100,
        ignore_case: bool = False,
        start_line: int = 1,
    ) -> JsonR:
        """Lines of a stored output matching ``pattern`` (a regex), with ``context`` lines around."""
        call = grep_ref_call(
            ref,
            pattern,
            context=context,
            max_matches=max_matches,
            ignore_case=ignore_case,
            start_line=start_line,
        )
        return self._run(call, _as_json)


class ClientOps(RefOps[JsonR], Generic[JsonR, NoneR, SessionR, SessionT]):
    """The operations on the service as a whole (sessions, stored outputs)."""

    # The session class this client makes (Session or AsyncSession).
    _session_class: Callable[..., SessionT]

    def session(self, sid: str) -> SessionT:
        """The object for session ``sid`` without a request (for a session you know exists)."""
        return self._session_class(self, sid)

    def _loaded(self, data: Json) -> SessionT:
        return self._session_class(self, data["id"], data)

    # --- sessions -------------------------------------------------------------------

    def create_session(
        self,
        model: str,
        *,
        id: str | None = None,  # noqa: A002 - the API's name
        agent: str | None = None,
        provider: str | None = None,
        context_window: int | None = None,
        max_output_tokens: int | None = None,
        buffer_tokens: int | None = None,
        tokenizer: str | None = None,
        policy: Mapping[str, Any] | None = None,
    ) -> SessionR:
        """A new session (``POST /sessions``); the service picks the id unless you do."""
        fields = {
            "model": model,
            "id": id,
            "agent": agent,
            "provider": provider,
            "context_window": context_window,
            "max_output_tokens": max_output_tokens,
            "buffer_tokens": buffer_tokens,
            "tokenizer": tokenizer,
            "policy": policy,
        }
        return self._run(create_session_call(fields), self._loaded)

    def get_session(self, sid: str) -> SessionR:
        """An existing session, its state loaded (``NotFoundError`` when there is none)."""
        return self._run(get_session_call(sid), self._loaded)

    def list_sessions(
        self,
        *,
        agent: str | None = None,
        status: str | None = None,
        cursor: int | None = None,
        limit: int = 50,
    ) -> JsonR:
        params = {"agent": agent, "status": status, "cursor": cursor, "limit": limit}
        return self._run(list_sessions_call(params), _as_json)

    def delete_session(self, sid: str) -> NoneR:
        """Delete the session with its transcript, outputs and snapshots."""
        return self._run(delete_session_call(sid), _as_nothing)


class SessionOps(RefOps[JsonR], Generic[ClientT, JsonR, NoneR]):
    """One session of the service: post what happens, ask what to send next.

    ``data`` holds the session's JSON as last loaded (``refresh()`` reloads it).
    """

    def __init__(self, client: ClientT, sid: str, data: Json | None = None) -> None:
        self.client = client
        self.id = sid
        self.data: Json = data or {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r})"

    def _run(self, call: Call, parse: Callable[[Any], Any]) -> Any:
        return self.client._run(call, parse)

    def _reloaded(self, data: Json) -> Json:
        self.data = data
        return data

    def refresh(self) -> JsonR:
        return self._run(get_session_call(self.id), self._reloaded)

    def delete(self) -> NoneR:
        return self._run(delete_session_call(self.id), _as_nothing)

    def set_system(self, sections: Sequence[Mapping[str, Any]]) -> JsonR:
        """The system prompt as sections ``[{name, content, cacheable?, kind?}]``."""
        return self._run(set_system_call(self.id, sections), _as_json)

    def set_tools(self, tools: Sequence[Mapping[str, Any]]) -> JsonR:
        """The tools offered to the model ``[{name, description, input_schema, category?}]``."""
        return self._run(set_tools_call(self.id, tools), _as_json)

    def append(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        format: MessageFormat | None = None,  # noqa: A002 - the API's name
        idempotency_key: str | None = None,
    ) -> JsonR:
        """Post messages (the service's shape, or a provider's with ``format``).

        Every call carries an Idempotency-Key (a fresh one unless given), so
        its retries are stored once. Returns per message ``seq``, ``token_count``,
        ``view`` …, and the new ``budget``.
        """
        call = append_call(self.id, messages, format=format, idempotency_key=idempotency_key)
        return self._run(call, _as_json)

    def retract(
        self,
        *,
        last: int | None = None,
        from_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> JsonR:
        """Take the last ``last`` live messages (or those from ``from_seq`` on) out of the window."""
        call = retract_call(self.id, last=last, from_seq=from_seq, idempotency_key=idempotency_key)
        return self._run(call, _as_json)

    def context(
        self,
        format: ContextFormat = "anthropic",  # noqa: A002
        *,
        extra_tokens: int = 0,
        purpose: ContextPurpose | None = None,
    ) -> JsonR:
        """The request body to send next, with its ``budget`` (remove that key before sending).

        ``purpose``: "call" (a model call follows: recorded and priced) or "read"
        (a look); the service's default is "read" for ``format="raw"``, else "call".
        """
        call = context_call(self.id, format=format, extra_tokens=extra_tokens, purpose=purpose)
        return self._run(call, _as_json)

    def budget(self, *, extra_tokens: int = 0) -> JsonR:
        return self._run(budget_call(self.id, extra_tokens=extra_tokens), _as_json)

    def usage(
        self,
        input_tokens: int = 0,
        output_tokens: int = 0,
        *,
        cache_creation_tokens: int = 0,
        cache_read_tokens: int = 0,
        through_seq: int | None = None,
    ) -> JsonR:
        """Report what the provider counted for the last call."""
        fields = usage_fields(
            input_tokens, output_tokens, cache_creation_tokens, cache_read_tokens, through_seq
        )
        return self._run(usage_call(self.id, fields), _as_json)

    def calls(self, *, cursor: int | None = None, limit: int = 50) -> JsonR:
        """The session's call records, newest first: ``{"items", "next_cursor"}``."""
        return self._run(calls_call(self.id, cursor=cursor, limit=limit), _as_json)

    def call(self, call_id: int) -> JsonR:
        """One call's record with its ``account``: the client's request beside what was sent."""
        return self._run(call_call(self.id, call_id), _as_json)

    def compact(
        self,
        *,
        strategy: str | None = None,
        instructions: str | None = None,
        retain_last_turns: int | None = None,
        wait: bool = False,
    ) -> JsonR:
        """Request a compaction; ``wait=True`` runs it in the request and returns its result."""
        fields = {
            "strategy": strategy,
            "instructions": instructions,
            "retain_last_turns": retain_last_turns,
            "wait": wait,
        }
        return self._run(compact_call(self.id, fields), _as_json)

    def snapshot(self) -> JsonR:
        """Resume data: the newest snapshot and the messages after it."""
        return self._run(snapshot_call(self.id), _as_json)

    def upload_output(self, data: UploadData, *, tool_name: str = "") -> JsonR:
        """Store a large tool output; a tool message then carries its ``ref`` as ``output_ref``.

        ``data``: bytes or text (retried like any call), or a binary file or
        an iterable of byte chunks (an async iterable for the async client),
        streamed as read and so sent once.
        """
        return self._run(upload_output_call(self.id, data, tool_name=tool_name), _as_json)
