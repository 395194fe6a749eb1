"""The deterministic summariser: no network, same input → same text (the default one).

It answers the same ``SummaryRequest`` an LLM gets (``engine.summarize``) and
keeps what the retention check looks for (``engine.retention``): a summary
from it is what the service falls back to when no LLM is configured.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from contextsvc.engine.build import RETAIN_HEADER, SUMMARY_HEADER
from contextsvc.engine.messages import Message
from contextsvc.engine.retention import KeyFact, decision_sentences, extract_key_facts, first_line
from contextsvc.engine.summarize import SummaryRequest, SummaryResult


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


@dataclass(frozen=True, slots=True)
class OfflineSummarizer:
    """A deterministic summariser: no network, same input → same text.

    Keeps what a continuation needs and an LLM summary is asked to keep: the
    user's requests and constraints, the assistant's decisions, file paths,
    error messages, TODOs and output refs (the key facts of ``retention``), and
    which tools ran. The answer is bounded by ``max_tokens`` (about 3.5
    characters per token, below the 4 of the estimate, so it fits).
    """

    name: str = "offline"
    request_chars: int = 300

    def complete(self, request: SummaryRequest) -> SummaryResult:
        # Never longer than a third of what it summarises (a summary must shrink
        # the window), never more than max_tokens allows.
        source_chars = sum(len(m.context_text) for m in request.source)
        budget = min(int(request.max_tokens * 3.5), max(1600, source_chars // 3))
        facts = extract_key_facts(request.source)
        summary = self._summary(
            request.source, facts, budget if request.kind == "compress" else budget * 2 // 3
        )
        if request.kind == "compress":
            text = summary
        else:
            retain = self._retain(facts, budget // 3) if request.want_retain else ""
            text = (
                f"<retain>\n{retain}\n</retain>\n" if retain else ""
            ) + f"<summary>\n{summary}\n</summary>"
        return SummaryResult(text=text, model="offline", summarizer=self.name)

    def _retain(self, facts: Sequence[KeyFact], budget: int) -> str:
        order = {"constraint": 0, "request": 1, "error": 2, "path": 3, "ref": 4, "todo": 5}
        labels = {
            "constraint": "Constraint",
            "request": "User request",
            "error": "Error",
            "path": "File",
            "ref": "Output ref",
            "todo": "TODO",
        }
        lines: list[str] = []
        used = 0
        for fact in sorted(facts, key=lambda f: (order.get(f.kind, 9), f.seq or 0)):
            line = f"- {labels.get(fact.kind, fact.kind)}: {fact.text}"
            if used + len(line) + 1 > budget:
                break
            lines.append(line)
            used += len(line) + 1
        return "\n".join(lines)

    def _summary(self, source: Sequence[Message], facts: Sequence[KeyFact], budget: int) -> str:
        requests: list[str] = []
        decisions: list[str] = []
        tools: Counter[str] = Counter()
        for msg in source:
            text = msg.context_text
            if msg.role == "user":
                if text.startswith((RETAIN_HEADER, SUMMARY_HEADER)):
                    # An earlier compaction's retain/summary: carried over whole,
                    # re-clipped below like everything else.
                    body = text.split("\n", 1)[1] if "\n" in text else ""
                    requests.append(f"(earlier) {_clip(body, self.request_chars * 3)}")
                elif text.strip():
                    requests.append(_clip(text, self.request_chars))
            elif msg.role == "assistant":
                for call in msg.tool_calls:
                    tools[call.name] += 1
                decisions.extend(decision_sentences(text))
                if text.strip() and not msg.tool_calls:
                    decisions.append(first_line(text, 200))
        sections: list[tuple[str, list[str]]] = [
            ("User requests", requests),
            ("Decisions and findings", list(dict.fromkeys(_clip(d, 200) for d in decisions))),
            ("Files", [f.text for f in facts if f.kind == "path"]),
            ("Errors", [f.text for f in facts if f.kind == "error"]),
            ("Output refs", [f.text for f in facts if f.kind == "ref"]),
            ("Open TODOs", [f.text for f in facts if f.kind == "todo"]),
            ("Tools used", [f"{name} ×{count}" for name, count in sorted(tools.items())]),
        ]
        header = f"Summary of {len(source)} earlier messages (offline summariser)."
        out = [header]
        used = len(header)
        # Each section gets a fair share first, newest items kept when a list is long
        # (the latest request and error matter most to continue).
        share = max(200, budget // len(sections))
        for title, items in sections:
            if not items:
                continue
            lines = [f"{title}:"]
            size = len(title) + 2
            chosen: list[str] = []
            room = max(40, share - size - 8)
            for item in reversed(items):
                # An item longer than the section's share is clipped, not dropped.
                line = f"- {item if len(item) <= room else item[: room - 1].rstrip() + '…'}"
                if size + len(line) + 1 > share or used + size + len(line) + 1 > budget:
                    break
                chosen.append(line)
                size += len(line) + 1
            if not chosen:
                continue
            skipped = len(items) - len(chosen)
            if skipped:
                lines.append(f"- ({skipped} earlier items omitted)")
            lines.extend(reversed(chosen))
            block = "\n".join(lines)
            out.append(block)
            used += len(block) + 2
        return "\n\n".join(out)
