"""What a summary says about the items of a list it has no room for: a compact index.

A summary keeps the newest items of each list (requests, files, output refs…)
within its room. The rest must not vanish without a trace: an agent whose
context no longer lists a ref cannot read that output with the ref tools. So
the items past the room become one line — how many, the seq range, and for
outputs the tools that made them and the paths they named — ending with the
search tool that reaches them (``engine.recall``). Pure: messages in, text out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from contextsvc.engine.messages import Message
from contextsvc.engine.recall import SEARCH_TOOL_NAME
from contextsvc.engine.retention import find_paths

# The paths an index names, at most (in characters, then "…").
NAMED_CHARS = 160
# Paths taken from one output's text (its arguments' paths come first).
PATHS_PER_OUTPUT = 2


@dataclass(frozen=True, slots=True)
class OutputEntry:
    """One stored output of the summarised span: when, which tool, what it named."""

    seq: int | None
    tool: str
    names: tuple[str, ...] = ()


@dataclass(slots=True)
class OutputCatalog:
    """The span's outputs by ref (``from_messages``)."""

    by_ref: dict[str, OutputEntry] = field(default_factory=dict)

    @classmethod
    def from_messages(cls, messages: Sequence[Message]) -> OutputCatalog:
        calls: dict[str, tuple[str, list[str]]] = {}
        catalog = cls()
        for msg in messages:
            for call in msg.tool_calls:
                args = "\n".join(v for v in call.arguments.values() if isinstance(v, str))
                calls[call.id] = (call.name, find_paths(args) if args else [])
            if msg.role != "tool" or not msg.output_ref:
                continue
            name, arg_paths = calls.get(msg.tool_call_id or "", (msg.name or "tool", []))
            # The output's own paths are only looked for in its head: a listing
            # of thousands would otherwise flood the index.
            own = find_paths(msg.context_text[:4_000])[:PATHS_PER_OUTPUT]
            names = tuple(dict.fromkeys([*arg_paths, *own]))
            catalog.by_ref[msg.output_ref] = OutputEntry(msg.seq, msg.name or name, names)
        return catalog


def _seq_range(seqs: Iterable[int | None]) -> str:
    known = [s for s in seqs if s is not None]
    if not known:
        return ""
    lo, hi = min(known), max(known)
    return f"seq {lo}" if lo == hi else f"seq {lo}–{hi}"


def _named(names: Sequence[str], room: int) -> str:
    """The newest names that fit in ``room`` characters, newest first ("…": more)."""
    out: list[str] = []
    size = 0
    for name in reversed(names):
        if size + len(name) + 2 > room - 3:
            out.append("…")
            break
        out.append(name)
        size += len(name) + 2
    return ", ".join(out) if out and out != ["…"] else ""


def _reach(search: bool) -> str:
    return f": reachable with {SEARCH_TOOL_NAME}" if search else ""


def outputs_index(
    refs: Sequence[str], catalog: OutputCatalog, *, search: bool, max_chars: int = 400
) -> str:
    """The line standing for the output refs not listed: count, seq range, tools and
    the paths they named (the newest first), as much as ``max_chars`` holds; the
    count, the range and the way in always stay.

    ``search`` false (the agent has no search tool): the same index, no tool named.
    """
    entries = [catalog.by_ref[r] for r in refs if r in catalog.by_ref]
    noun = "output" if len(refs) == 1 else "outputs"
    head = f"- {len(refs)} earlier {noun} not listed ("
    tail = f"){_reach(search)}"
    span = _seq_range(e.seq for e in entries)
    tools = Counter(e.tool for e in entries)
    by_tool = ", ".join(f"{name} ×{n}" for name, n in sorted(tools.items(), key=lambda t: -t[1]))
    details = [f"{span}: {by_tool}" if span and by_tool else span or by_tool]
    if len(entries) < len(refs):
        details.append(f"{len(refs) - len(entries)} named in messages")
    if len(head) + len("; ".join(details)) + len(tail) > max_chars:
        details = [span] if span else []
    room = max_chars - len(head) - len("; ".join(details)) - len(tail) - len("; named ")
    names = list(dict.fromkeys(n for e in entries for n in e.names))
    named = _named(names, min(room, NAMED_CHARS)) if names else ""
    if named:
        details.append(f"named {named}")
    return f"{head}{'; '.join(d for d in details if d)}{tail}"


def items_index(count: int, seqs: Iterable[int | None], *, search: bool) -> str:
    """The line standing for ``count`` items of a list not listed, with their seq range."""
    span = _seq_range(seqs)
    noun = "item" if count == 1 else "items"
    return f"- {count} earlier {noun} not listed{f' ({span})' if span else ''}{_reach(search)}"
