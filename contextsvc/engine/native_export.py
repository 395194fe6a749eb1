"""A whole transcript as one provider's native messages, converted a piece at a time.

The transcript export (``GET /sessions/{sid}/export?format=anthropic|openai|gemini``)
streams a session of any length with flat memory, so it cannot hand the whole
history to ``engine.build`` at once. ``NativeTranscript`` is fed the messages
in seq order, a chunk at a time, and gives back the native messages that are
final; the result is what ``engine.build`` makes of the same messages in one
pass, as history (``tests/engine/test_native_export.py`` holds it to that):

- the history goes through ``engine.wellformed`` (every call followed by its
  result, orphan results as user text, whitespace-only messages left out,
  tool-call ids unique and valid) and the provider converters
  (``providers.history``); Anthropic turns are merged and placed by
  ``engine.anthropic_turns``, Gemini turns as the build merges them
  (``providers.gemini_build``), a system message as marked user text;
- a piece ends only where no tool call is waiting for its result, so pairing
  across pieces is what it would be in one pass; the ids handed out so far
  (``wellformed.CallIds``) carry over, so a reused id is renamed the same way,
  and only the first piece gets the synthetic leading user turn;
- an Anthropic or Gemini turn may go on in the next piece (merged turns), so
  the last native message is held back until the next piece or ``finish``.

One bound keeps memory flat on any transcript: when a call stays unanswered
for more than ``max_pending`` messages (a call the agent never answered, or
answers far later), the piece ends anyway; that call gets the synthetic "no
result" it would get at the end of a request, and its late result (if any)
travels as user text, as a result whose call fell out of a window does.

Tool calls always travel as tool blocks (``tools=True``): the export carries
the conversation, not a request, and a request that replays it defines the
tools it called.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .anthropic_turns import add_turn, restore_strings, strip_prefill, system_reminder
from .messages import Message
from .providers.gemini_build import history_contents
from .providers.history import openai_message
from .wellformed import CallIds, well_formed

NATIVE_FORMATS = ("anthropic", "openai", "gemini")
# Messages held while a call waits for its result before the piece ends anyway.
MAX_PENDING = 2_000


class NativeTranscript:
    """Transcript messages in, native messages out (see the module docstring)."""

    def __init__(self, fmt: str, *, mid_system: bool = True, max_pending: int = MAX_PENDING):
        if fmt not in NATIVE_FORMATS:
            raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(NATIVE_FORMATS)}")
        self.fmt = fmt
        self.mid_system = mid_system
        self.max_pending = max_pending
        self._ids = CallIds()
        self._first = True
        self._pending: list[Message] = []
        # Calls of the pending messages still waiting for a result: id -> how many.
        self._open: dict[str, int] = {}
        # Anthropic: the last native message (it may take the next piece's turn)
        # and whether it is one message posted as a string.
        self._held: list[dict[str, Any]] = []
        self._held_strings: set[int] = set()

    def feed(self, messages: Iterable[Message]) -> list[dict[str, Any]]:
        """Take the next messages (seq order); → the native messages now final."""
        end = None  # the pending messages before this index form a piece
        for msg in messages:
            if not self._open:
                end = len(self._pending)
            self._pending.append(msg)
            self._track(msg)
        if self._open and len(self._pending) > self.max_pending:
            end = len(self._pending)  # the bound: the waiting calls close here
            self._open.clear()
        elif not self._open:
            end = len(self._pending)
        if not end:
            return []
        piece, self._pending = self._pending[:end], self._pending[end:]
        return self._convert(piece)

    def finish(self) -> list[dict[str, Any]]:
        """The rest: the pending messages and the held turn."""
        out = self._convert(self._pending) if self._pending else []
        self._pending, self._open = [], {}
        if self.fmt == "gemini":
            out.extend(self._held)
            self._held = []
        elif self.fmt == "anthropic" and self._held:
            strip_prefill(self._held)
            restore_strings(self._held, self._held_strings)
            out.extend(self._held)
            self._held, self._held_strings = [], set()
        return out

    def _track(self, msg: Message) -> None:
        if msg.role == "assistant":
            for call in msg.tool_calls:
                self._open[call.id] = self._open.get(call.id, 0) + 1
        elif msg.role == "tool" and msg.tool_call_id in self._open:
            left = self._open[msg.tool_call_id] - 1
            if left:
                self._open[msg.tool_call_id] = left
            else:
                del self._open[msg.tool_call_id]

    def _convert(self, piece: list[Message]) -> list[dict[str, Any]]:
        history = well_formed(piece, tools=True, ids=self._ids, leading_user=self._first)
        if history:  # the history starts with the first piece that sends anything
            self._first = False
        if self.fmt == "openai":
            return [openai_message(m) for m in history]
        if self.fmt == "gemini":
            return self._gemini(history, leading_user=not self._held)
        messages, strings = self._held, self._held_strings
        for msg in history:
            add_turn(messages, strings, msg, mid_system=self.mid_system)
        if len(messages) <= 1:
            return []
        done, self._held = messages[:-1], messages[-1:]
        last = len(messages) - 1
        self._held_strings = {0} if last in strings else set()
        restore_strings(done, {i for i in strings if i < last})
        return done

    def _gemini(self, history: list[Message], *, leading_user: bool) -> list[dict[str, Any]]:
        """Gemini turns of a piece; the last is held: the next piece may go on with its role."""
        history = [
            Message(role="user", content=system_reminder(m), seq=m.seq) if m.role == "system" else m
            for m in history
        ]
        turns = history_contents(history, leading_user=leading_user)
        if self._held and turns and turns[0]["role"] == self._held[0]["role"]:
            self._held[0]["parts"].extend(turns.pop(0)["parts"])
        turns = self._held + turns
        if not turns:
            return []
        self._held = turns[-1:]
        return turns[:-1]
