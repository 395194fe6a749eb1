"""The deterministic summariser: no network, same input → same text (the default one).

It answers the same ``SummaryRequest`` an LLM gets (``engine.summarize``) and
keeps what the retention check looks for (``engine.retention``): a summary
from it is what the service falls back to when no LLM is configured.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from contextsvc.engine.messages import Message
from contextsvc.engine.recall import SEARCH_TOOL_NAME, without_search_hint
from contextsvc.engine.retention import KeyFact, decision_sentences, extract_key_facts, first_line
from contextsvc.engine.summarize import SummaryRequest, SummaryResult
from contextsvc.engine.summary_index import OutputCatalog, items_index, outputs_index
from contextsvc.engine.summary_placement import RETAIN_HEADER, SUMMARY_HEADER

# A list item and the seq of the message it came from.
Item = tuple[str, int | None]
REFS_TITLE = "Output refs"
RETAIN_MORE = "more facts of the summarised span are not kept here"
# Characters the index of unlisted output refs may take past the section's share.
INDEX_NAMES_ROOM = 80


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
            request.source,
            facts,
            budget if request.kind == "compress" else budget * 2 // 3,
            request.search_hint,
        )
        if request.kind == "compress":
            text = summary
        else:
            retain = (
                self._retain(facts, budget // 3, request.search_hint) if request.want_retain else ""
            )
            text = (
                f"<retain>\n{retain}\n</retain>\n" if retain else ""
            ) + f"<summary>\n{summary}\n</summary>"
        return SummaryResult(text=text, model="offline", summarizer=self.name)

    def _retain(self, facts: Sequence[KeyFact], budget: int, search: bool = True) -> str:
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
        # Said when facts do not fit, so the cut is not silent; the same words on
        # every compaction, so merged retain blocks keep one copy of it.
        more = f"- ({RETAIN_MORE}{f': {SEARCH_TOOL_NAME} finds them' if search else ''})"
        used = len(more) + 1
        ordered = sorted(facts, key=lambda f: (order.get(f.kind, 9), f.seq or 0))
        for fact in ordered:
            line = f"- {labels.get(fact.kind, fact.kind)}: {fact.text}"
            if used + len(line) + 1 > budget:
                break
            lines.append(line)
            used += len(line) + 1
        if len(lines) < len(ordered):
            lines.append(more)
        return "\n".join(lines)

    def _summary(
        self,
        source: Sequence[Message],
        facts: Sequence[KeyFact],
        budget: int,
        search: bool = True,
    ) -> str:
        requests: list[Item] = []
        decisions: list[Item] = []
        tools: Counter[str] = Counter()
        for msg in source:
            text = msg.context_text
            if msg.role == "user":
                if text.startswith((RETAIN_HEADER, SUMMARY_HEADER)):
                    # An earlier compaction's retain/summary: carried over whole,
                    # re-clipped below like everything else (its search hint is
                    # added again where this summary enters the context).
                    body = text.split("\n", 1)[1] if "\n" in text else ""
                    body = without_search_hint(body)
                    requests.append((f"(earlier) {_clip(body, self.request_chars * 3)}", msg.seq))
                elif text.strip():
                    requests.append((_clip(text, self.request_chars), msg.seq))
            elif msg.role == "assistant":
                for call in msg.tool_calls:
                    tools[call.name] += 1
                found = decision_sentences(text)
                if text.strip() and not msg.tool_calls:
                    found.append(first_line(text, 200))
                decisions.extend((_clip(d, 200), msg.seq) for d in found)

        def of(kind: str) -> list[Item]:
            return [(f.text, f.seq) for f in facts if f.kind == kind]

        sections: list[tuple[str, list[Item]]] = [
            ("User requests", requests),
            ("Decisions and findings", list({d[0]: d for d in decisions}.values())),
            ("Files", of("path")),
            ("Errors", of("error")),
            (REFS_TITLE, of("ref")),
            ("Open TODOs", of("todo")),
            ("Tools used", [(f"{name} ×{n}", None) for name, n in sorted(tools.items())]),
        ]
        catalog = OutputCatalog.from_messages(source)
        header = f"Summary of {len(source)} earlier messages (offline summariser)."
        out = [header]
        used = len(header)
        # Each section gets a fair share first, newest items kept when a list is long
        # (the latest request and error matter most to continue); the older ones
        # become one index line (``engine.summary_index``), never a silent cut.
        share = max(200, budget // len(sections))
        for title, items in sections:
            if not items:
                continue
            room = max(40, share - len(title) - 10)
            chosen: list[str] = []
            size = len(title) + 2
            for text, _ in reversed(items):
                # An item longer than the section's share is clipped, not dropped.
                line = f"- {text if len(text) <= room else text[: room - 1].rstrip() + '…'}"
                if size + len(line) + 1 > share or used + size + len(line) + 1 > budget:
                    break
                chosen.append(line)
                size += len(line) + 1
            index = ""
            while len(chosen) < len(items):
                left = items[: len(items) - len(chosen)]
                if title == REFS_TITLE:
                    # The paths the earlier outputs named are how the agent finds
                    # them again: the index may take ``INDEX_NAMES_ROOM`` past the
                    # share, and at least half of it plus that (newest refs give way).
                    allowance = share + INDEX_NAMES_ROOM
                    fit = max(allowance - size - 1, share // 2 + INDEX_NAMES_ROOM)
                    refs = [t for t, _ in left]
                    index = outputs_index(refs, catalog, search=search, max_chars=fit)
                else:
                    allowance = share
                    index = items_index(len(left), (q for _, q in left), search=search)
                if size + len(index) + 1 <= allowance and used + size + len(index) + 1 <= budget:
                    break
                if len(chosen) <= 1:
                    # The newest item stays; the index goes past the share when
                    # it must, as long as the summary's budget holds it.
                    index = index if used + size + len(index) + 1 <= budget else ""
                    break
                size -= len(chosen.pop()) + 1
            if not chosen and not index:
                continue
            lines = [f"{title}:", *([index] if index else []), *reversed(chosen)]
            block = "\n".join(lines)
            out.append(block)
            used += len(block) + 2
        return "\n\n".join(out)
