"""A long scripted task for the fake Messages API: many Bash steps with shell-computed markers, then a recall question.

The task (``LongTask``): ``steps`` Bash commands, step ``k`` printing
``size(k)`` bytes of generated lines with one marker line in them,
``MARK-<label> <12 hex>``, where the hex is ``sha256("seed-<nonce>-<k>")``
as the shell computes it. The command never holds the marker's text (it
prints the label with ``printf '%s'``), so whoever answers can only learn a
marker by reading that step's output. The sizes run from 1 KB to 60 KB, one
of them 400 KB. Then the question (the next user turn) asks for six steps'
markers: two early, two in the middle, two late.

``LongRunModel`` is the fake model (``FakeAnthropic.agent``). Like a model it
sees only the request it gets and keeps no state between calls:

- steps: (loading ``Bash`` with ``tool_search`` first when the proxy
  deferred it) the next step is one past the highest ``long-run step N`` it can
  see (its own earlier Bash calls, or the summary it wrote when the client
  compacted), so it follows the conversation it is shown;
- the question: for each asked label it looks for ``MARK-<label> <hex>`` in
  the request text; for a label not found it uses the tools the request
  offers, each way once (which it tried it reads from its own calls in the
  request): ``history_search`` for the marker, then for the step's header
  ``STEP-<label>-BEGIN`` and, in the output that header is in, for the line
  naming a file the client saved the output to (Claude Code keeps an output
  over ~30 KB in a file and sends a 2 KB preview: a marker past it is only in
  that file); ``grep`` through the client's Bash on the saved files the
  request names; ``tool_output_cache_grep`` over the refs the request shows
  (the asked steps' own first). With nothing left to try it answers with
  what it found.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shlex
import time
from dataclasses import dataclass, field
from typing import Any

from contextsvc.engine.recall import SEARCH_TOOL_NAME
from fakes.claude_code import COMPACT_PROMPT
from fakes.streams import ScriptedReply

GREP_TOOL = "tool_output_cache_grep"
TOOL_SEARCH = "tool_search"  # the proxy's, when it defers the client's tools
TASK = "Run the numbered long-run Bash steps the tool asks for, one at a time, then say done."
QUESTION = "Report the markers of steps: "
STEPS_DONE = "Steps done."
STEP_TAG = re.compile(r"long-run step (\d+)\b")
REF = re.compile(r"\bout_[A-Za-z0-9]+")
SAVED_TO = re.compile(r"Full output saved to: ([^\s\"'\\]+)")
# Calls the model makes for one question before it answers with what it has: a guard
# against a loop (a proxy that kept dropping its calls would show as missed markers).
MAX_RECALL_CALLS = 30
LINE = "{label} line %06g: generated padding, no marker on this line at all\n"
KB = 1024


def label(step: int) -> str:
    return f"s{step:03d}"


@dataclass(frozen=True)
class LongTask:
    """What to run: sizes, where the markers sit in each output, which steps the question asks."""

    steps: int
    nonce: str = "0"
    # Where in its output a step's marker line sits (0: first line, 0.5: the middle).
    at: float = 0.5
    max_size: int = 60 * KB
    big: int = 400 * KB

    def size(self, step: int) -> int:
        # Log-uniform between 1 KB and max_size: most outputs small, some large; one big.
        # The asked steps' sizes are fixed, small and large in turn, so every run asks
        # for markers in outputs Claude Code sends whole and in ones it keeps in a file.
        if step == self.steps // 3:
            return self.big
        asked = self.asked()
        if step in asked:
            share = (0.03, 0.7, 0.12, 0.9, 0.02, 0.6)[asked.index(step) % 6]
            return max(KB, int(self.max_size * share))
        rng = random.Random(f"{self.nonce}-{step}")
        return int(KB * (self.max_size / KB) ** rng.random())

    def asked(self) -> list[int]:
        n = self.steps
        return sorted({3, 5, n // 4, n // 2, n * 5 // 8, n - 3})

    def marker(self, step: int) -> str:
        return hashlib.sha256(f"seed-{self.nonce}-{step}".encode()).hexdigest()[:12]

    def expected(self) -> dict[str, str]:
        return {label(k): self.marker(k) for k in self.asked()}

    def command(self, step: int) -> str:
        name = label(step)
        lines = max(1, (self.size(step) - 60) // len(LINE.format(label=name) % 1))
        before = int(lines * self.at)
        fmt = shlex.quote(LINE.format(label=name).rstrip("\n"))
        parts = [f": long-run step {step}", f"echo STEP-{name}-BEGIN"]
        if before:
            parts.append(f"seq -f {fmt} 1 {before}")
        parts.append(f"printf 'MARK-%s ' {name}")
        parts.append(f"echo -n seed-{self.nonce}-{step} | sha256sum | cut -c1-12")
        if lines > before:
            parts.append(f"seq -f {fmt} {before + 1} {lines}")
        parts.append(f"echo STEP-{name}-END")
        return "; ".join(parts)

    def question(self) -> str:
        return QUESTION + ", ".join(label(k) for k in self.asked())


def parse_answer(text: str) -> dict[str, str]:
    """``s003=abcdef012345 s020=?`` -> the markers the answer names (not the unfound ones)."""
    return dict(re.findall(r"\b(s\d{3})=([0-9a-f]{12})\b", text))


# --- what a request shows --------------------------------------------------------------


def _block_texts(block: dict[str, Any]) -> list[str]:
    kind = block.get("type")
    if kind == "text":
        return [block.get("text", "")]
    if kind == "tool_result":
        inner = block.get("content")
        if isinstance(inner, str):
            return [inner]
        return [b.get("text", "") for b in inner or () if b.get("type") == "text"]
    return []


def request_texts(body: dict[str, Any]) -> list[str]:
    """Every text of the request the model reads: system, messages, tool results."""
    out: list[str] = []
    system = body.get("system")
    if isinstance(system, str):
        out.append(system)
    else:
        out.extend(b.get("text", "") for b in system or () if isinstance(b, dict))
    for message in body.get("messages") or ():
        content = message.get("content")
        if isinstance(content, str):
            out.append(content)
            continue
        for block in content or ():
            out.extend(_block_texts(block))
    return out


def tool_uses(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        block
        for message in body.get("messages") or ()
        if message.get("role") == "assistant" and isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_use"
    ]


def _results(body: dict[str, Any]) -> dict[str, str]:
    """The text of each tool result, by the id of the call it answers."""
    return {
        block.get("tool_use_id", ""): "\n".join(_block_texts(block))
        for message in body.get("messages") or ()
        if message.get("role") == "user" and isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    }


def _user_texts(body: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for message in body.get("messages") or ():
        if message.get("role") != "user":
            continue
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        out.extend(b.get("text", "") for b in blocks or () if b.get("type") == "text")
    return out


# --- the model -----------------------------------------------------------------------


@dataclass
class LongRunModel:
    """The fake model for a ``LongTask`` (module doc). Counters for the bench and tests."""

    task: LongTask
    # False: the model leaves history_search alone, as before it existed (the bench's baseline).
    use_search: bool = True
    calls: int = 0
    client_compactions: int = 0
    searches: int = 0
    greps: int = 0
    file_greps: int = 0
    # Per built-in round: from the reply calling it to the next request (ms).
    search_ms: list[float] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    recall_calls: int = 0
    _asked_at: float | None = None

    def __call__(self, body: dict[str, Any]) -> ScriptedReply:
        self.calls += 1
        if self._asked_at is not None:
            self.search_ms.append((time.monotonic() - self._asked_at) * 1000)
            self._asked_at = None
        tools = {t.get("name", "") for t in body.get("tools") or ()}
        texts = request_texts(body)
        user = _user_texts(body)
        if user and user[-1].startswith(COMPACT_PROMPT):
            self.client_compactions += 1
            return ScriptedReply(text=self._summary(body, texts))
        if "Bash" not in tools and TOOL_SEARCH not in tools:
            # A client's side request (a title, a quota probe): not part of the task.
            return ScriptedReply(text="Side answer")
        question = next((t for t in reversed(user) if QUESTION in t), None)
        if question is not None:
            return self._recall(body, tools, texts, question)
        if "Bash" not in tools:
            # The proxy deferred the client's tools (a small window): load Bash first.
            arguments = {"query": "select:Bash"}
            return ScriptedReply(
                tool_calls=[{"name": TOOL_SEARCH, "arguments": arguments, "id": None}]
            )
        step = self._done(body, texts) + 1
        if step >= self.task.steps:
            return ScriptedReply(text=STEPS_DONE)
        command = self.task.command(step)
        return ScriptedReply(
            tool_calls=[
                {
                    "name": "Bash",
                    "arguments": {"command": command, "description": f"long-run step {step}"},
                    "id": None,
                }
            ]
        )

    def _done(self, body: dict[str, Any], texts: list[str]) -> int:
        seen = [int(n) for t in texts for n in STEP_TAG.findall(t)]
        for use in tool_uses(body):
            seen += [int(n) for n in STEP_TAG.findall(json.dumps(use.get("input")))]
        return max(seen, default=-1)

    def _summary(self, body: dict[str, Any], texts: list[str]) -> str:
        """Claude Code's compaction: the summary carries the step reached and the question."""
        question = next((t for t in texts if QUESTION in t), "")
        asked = question[question.index(QUESTION) :].splitlines()[0] if question else ""
        found = " ".join(f"MARK-{k} {v}" for k, v in self._found(texts).items())
        done = self._done(body, texts)
        return (
            f"<summary>\nThe task: {TASK}\nDone through long-run step {done}.\n"
            f"{asked}\nFound so far: {found or 'none'}\n</summary>"
        )

    def _found(self, texts: list[str]) -> dict[str, str]:
        joined = "\n".join(texts)
        return dict(re.findall(r"MARK-(s\d{3}) ([0-9a-f]{12})\b", joined))

    def _recall(
        self, body: dict[str, Any], tools: set[str], texts: list[str], question: str
    ) -> ScriptedReply:
        wanted = re.findall(r"\bs\d{3}\b", question[question.index(QUESTION) :])
        found = self._found(texts)
        missing = [w for w in wanted if w not in found]
        calls = self._next_calls(body, tools, texts, missing) if missing else []
        if calls:
            return ScriptedReply(tool_calls=calls)
        answer = " ".join(f"{w}={found.get(w, '?')}" for w in wanted)
        self.answers.append(answer)
        return ScriptedReply(text=f"MARKERS {answer}")

    def _next_calls(
        self, body: dict[str, Any], tools: set[str], texts: list[str], missing: list[str]
    ) -> list[dict[str, Any]]:
        """The first ways the request offers that are not yet tried for the missing labels."""
        self.recall_calls += 1
        if self.recall_calls > MAX_RECALL_CALLS:
            return []
        uses = tool_uses(body)
        if SEARCH_TOOL_NAME in tools and self.use_search:
            done = _searches(body)
            tried = {json.dumps(args, sort_keys=True) for args, _ in done}
            todo = []
            for w in missing:
                step = next(
                    (
                        a
                        for a in _search_plan(w, done)
                        if json.dumps(a, sort_keys=True) not in tried
                    ),
                    None,
                )
                if step is not None and step not in todo:
                    todo.append(step)
            if todo:
                self.searches += len(todo)
                self._asked_at = time.monotonic()
                return [{"name": SEARCH_TOOL_NAME, "arguments": a, "id": None} for a in todo]
        pattern = "MARK-(" + "|".join(missing) + r") [0-9a-f]{12}"
        if "Bash" in tools:
            # Files the client saved outputs to (Claude Code: over ~30 KB), one grep for all.
            tried_bash = " ".join(json.dumps(u["input"]) for u in uses if u["name"] == "Bash")
            paths = sorted({p for t in texts for p in SAVED_TO.findall(t) if p not in tried_bash})
            if paths:
                self.file_greps += 1
                command = f"grep -hoE {shlex.quote(pattern)} " + " ".join(map(shlex.quote, paths))
                arguments = {"command": command, "description": "find the markers"}
                return [{"name": "Bash", "arguments": arguments, "id": None}]
        if GREP_TOOL in tools:
            grepped = {str(u["input"].get("ref_id")) for u in uses if u["name"] == GREP_TOOL}
            # The refs of the asked steps' own outputs first (their calls name the
            # step), then every other ref the request shows (a summary's list).
            results = _results(body)
            named = [
                r
                for u in uses
                if any(f"STEP-{w}-BEGIN" in json.dumps(u.get("input")) for w in missing)
                for r in REF.findall(results.get(u.get("id"), ""))
            ]
            others = sorted({r for t in texts for r in REF.findall(t)})
            refs = [r for r in dict.fromkeys(named + others) if r not in grepped]
            if refs:
                self.greps += len(refs[:20])
                self._asked_at = time.monotonic()
                return [
                    {"name": GREP_TOOL, "arguments": {"ref_id": r, "pattern": pattern}, "id": None}
                    for r in refs[:20]
                ]
        return []


def _searches(body: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The model's history_search calls in the request, each with its parsed result ({} if none)."""
    results = _results(body)
    out = []
    for use in tool_uses(body):
        if use["name"] != SEARCH_TOOL_NAME:
            continue
        try:
            parsed = json.loads(results.get(use.get("id"), "") or "{}")
        except ValueError:
            parsed = {}
        out.append((dict(use.get("input") or {}), parsed if isinstance(parsed, dict) else {}))
    return out


def _search_plan(w: str, done: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[dict[str, Any]]:
    """The searches for one label, in order: its marker; its output's header; then, in each
    output the header was found in, the line naming a file the output was saved to (Claude
    Code's preview of an output too large to send: the marker is only in that file)."""
    header = f"STEP-{w}-BEGIN"
    plan: list[dict[str, Any]] = [
        {"query": f"MARK-{w}", "limit": 50},
        {"query": header, "limit": 50},
    ]
    for args, result in done:
        if args.get("query") != header:
            continue
        for hit in result.get("hits") or ():
            if hit.get("role") == "tool" and header in str(hit.get("snippet")):
                seq = hit["seq"]
                plan.append({"query": "Full output saved to", "seq_from": seq, "seq_to": seq})
    return plan
