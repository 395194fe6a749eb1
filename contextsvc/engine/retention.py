"""Key facts of a compacted span and whether they survive the compaction (the retention score).

Deterministic: regular expressions over the in-context text, no model. A
compaction extracts the facts of everything it removes or rewrites, then looks
for each one in the new window (retain + summary + kept messages). The share
found is the retention score; the rest is the list of what was lost.

Fact kinds: the user's requests and constraints, file paths, error messages,
open TODOs and tool-output refs. Tool outputs only contribute errors and refs
(and paths given as tool *arguments*): a directory listing would otherwise
flood the list with paths nobody asked to keep. Whether a fact that left the
window can still be reached is ``engine.reachability``'s question.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from contextsvc.engine.messages import Message

FactKind = Literal["request", "constraint", "path", "error", "todo", "ref"]

MAX_FACT_CHARS = 200
MAX_PER_MESSAGE = 8  # per kind
MAX_FACTS = 400
# A paraphrasing summary keeps a request when most of its content words are there.
WORD_OVERLAP = 0.6

_EXTENSIONS = (
    "py|pyi|js|mjs|cjs|ts|tsx|jsx|go|rs|java|kt|scala|c|h|cc|cpp|hpp|cs|rb|php|swift|m|"
    "md|rst|txt|json|jsonl|ya?ml|toml|cfg|ini|conf|env|sh|bash|zsh|ps1|sql|html?|css|scss|"
    "lock|xml|csv|tsv|ipynb|proto|gradle|mk|dockerfile|tf|lua|r|pl|ex|exs|erl|hs|vue|svelte|log"
)
_PATH_RE = re.compile(
    r"(?<![\w/.:@-])"
    r"(?:"
    r"(?:~|\.{1,2})?/(?:[\w.@+-]+/)*[\w.@+-]+"  # /abs/path, ./rel, ~/x
    r"|(?:[\w@+-][\w.@+-]*/)+[\w.@+-]+"  # dir/sub/file
    rf"|[\w-][\w.-]*\.(?:{_EXTENSIONS})\b"  # bare file.ext
    r")",
    re.IGNORECASE,
)
_LAST_SEGMENT_EXT_RE = re.compile(rf"\.(?:{_EXTENSIONS})$", re.IGNORECASE)
_ERROR_RE = re.compile(
    r"(?-i:\b[A-Z]\w*(?:Error|Exception|Failure)\b)"
    r"|Traceback \(most recent call last\)"
    r"|\bFAILED\b|\bFAIL:"
    r"|(?:^|\s)(?:error|fatal|panic)(?:\[\w+\])?:"
    r"|\bsegmentation fault\b|\bcommand not found\b|\bNo such file or directory\b"
    r"|\bpermission denied\b",
    re.IGNORECASE,
)
_TODO_RE = re.compile(
    r"\bTODO\b|\bFIXME\b|- \[ \]|\bnext steps?:|\bstill (?:need|to do)\b", re.IGNORECASE
)
_REF_RE = re.compile(r"\bref(?:_id)?\s*[=:]\s*[\"']?([A-Za-z0-9_\-]{4,64})")
_CONSTRAINT_RE = re.compile(
    r"\b(?:must(?:n't| not)?|never|always|do not|don't|should(?:n't| not)?|only|make sure|"
    r"ensure|required?|without|avoid|keep|no more than|at (?:least|most))\b",
    re.IGNORECASE,
)
_DECISION_RE = re.compile(
    r"\b(?:I(?:'ll| will)|I(?:'ve| have) decided|decided|let's|we(?:'ll| will| should)|"
    r"the (?:fix|cause|problem|issue) (?:is|was)|root cause|plan(?: is)?:|going to|instead)\b",
    re.IGNORECASE,
)
_SENTENCE_SPLIT_RE = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD_RE = re.compile(r"[a-z0-9_]{3,}")
_IDENT_RE = re.compile(r"[0-9_]")
_STOPWORDS = frozenset(
    "the and for that this with you your are was were have has had not but all any can "
    "from they them then than there their what when where which who will would could should "
    "into onto out about also just some such very more most other only its it's our ours "
    "please let lets make sure".split()
)
# Service-written user messages: never a user's request.
_HEADERS = (
    "[Retained context from earlier",
    "[Summary of the earlier conversation",
    "[Earlier messages omitted from this summary input",
)


# The labels the offline summariser writes in a retain block (engine.offline_summarizer).
_LABEL_KINDS: dict[str, FactKind] = {
    "Constraint": "constraint",
    "User request": "request",
    "Error": "error",
    "File": "path",
    "Output ref": "ref",
    "TODO": "todo",
}
_LABELLED_RE = re.compile(r"^- (" + "|".join(map(re.escape, _LABEL_KINDS)) + r"): (.+)$")


@dataclass(frozen=True, slots=True)
class KeyFact:
    kind: FactKind
    text: str
    seq: int | None = None
    # The output ref of the tool message the fact came from (recoverable by expansion).
    from_ref: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "text": self.text}
        if self.seq is not None:
            out["seq"] = self.seq
        if self.from_ref:
            out["from_ref"] = self.from_ref
        return out


def normalize(text: str) -> str:
    return " ".join(text.lower().split())


def first_line(text: str, limit: int = MAX_FACT_CHARS) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"
    return ""


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_FACT_CHARS else text[: MAX_FACT_CHARS - 1].rstrip() + "…"


def _sentences(text: str) -> Iterable[str]:
    for piece in _SENTENCE_SPLIT_RE.split(text):
        piece = piece.strip(" \t-*•>")
        if len(piece) >= 8:
            yield piece


def decision_sentences(text: str, limit: int = 5) -> list[str]:
    """Assistant sentences that state a decision or a finding (offline summary)."""
    out = []
    for sentence in _sentences(text):
        if _DECISION_RE.search(sentence):
            out.append(_clip(sentence))
            if len(out) >= limit:
                break
    return out


def find_paths(text: str) -> list[str]:
    # One pass over the text. The look-behind only lets a path start at a token
    # start, which also skips URLs: "//host/x" follows ":" and "/x" follows "/".
    out: list[str] = []
    for match in _PATH_RE.finditer(text):
        path = match.group(0).rstrip(".,:;)]}'\"")
        if len(path) < 3 or len(path) > MAX_FACT_CHARS:
            continue
        if "/" in path:
            # "and/or", "w/o", "1/2": a path has a root, a dot-dir, or a file extension.
            if not (
                path.startswith(("/", "./", "../", "~/"))
                or _LAST_SEGMENT_EXT_RE.search(path)
                or path.count("/") >= 2
            ):
                continue
            if path.strip("/").replace("/", "").isdigit():
                continue
        out.append(path)
    return out


def _matching_lines(
    pattern: re.Pattern[str], text: str, hints: tuple[str, ...], limit: int
) -> list[str]:
    """The first ``limit`` lines of ``text`` in which ``pattern`` matches.

    Every match contains one of ``hints`` (lowercase): candidate lines are found
    with ``str.find`` (C speed) and only they meet the regex, which would
    otherwise try its alternation at every position of a long tool output.
    """
    lowered = text.lower()
    spans: set[tuple[int, int]] = set()
    for hint in hints:
        found = 0
        pos = lowered.find(hint)
        while pos != -1 and found < 4 * limit:
            start = lowered.rfind("\n", 0, pos) + 1
            end = lowered.find("\n", pos)
            end = len(lowered) if end == -1 else end
            spans.add((start, end))
            found += 1
            pos = lowered.find(hint, end)
    out: list[str] = []
    for start, end in sorted(spans):
        line = text[start:end]
        if pattern.search(line):
            clipped = _clip(line)
            if clipped:
                out.append(clipped)
                if len(out) >= limit:
                    break
    return out


# Substrings every match of the pattern contains (lowercased).
_ERROR_HINTS = (
    "error", "exception", "failure", "traceback", "fail", "fatal", "panic",
    "segmentation", "not found", "no such file", "permission denied",
)  # fmt: skip
_TODO_HINTS = ("todo", "fixme", "- [ ]", "next step", "still ")


def _error_lines(text: str) -> list[str]:
    return _matching_lines(_ERROR_RE, text, _ERROR_HINTS, 2 * MAX_PER_MESSAGE)


def _todo_lines(text: str) -> list[str]:
    return _matching_lines(_TODO_RE, text, _TODO_HINTS, 2 * MAX_PER_MESSAGE)


def _arguments_text(message: Message) -> str:
    parts = []
    for call in message.tool_calls:
        for value in call.arguments.values():
            if isinstance(value, str):
                parts.append(value)
    return "\n".join(parts)


# (kind, text, primary?) per message, memoised: a compaction extracts the facts
# of the same span twice (the offline summariser, then the retention check),
# and str objects cache their hash, so a hit costs nothing.
_Found = tuple[tuple[FactKind, str, bool], ...]
_CACHE: dict[tuple[str, str, str, str | None], _Found] = {}
_CACHE_SIZE = 20_000


def _message_facts(role: str, text: str, args: str, output_ref: str | None) -> _Found:
    key = (role, text, args, output_ref)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    found: list[tuple[FactKind, str, bool]] = []
    if role == "user" and text.startswith(_HEADERS[0]):
        # An earlier retain block: its "- Label: fact" lines carry forward as
        # the facts they are, not re-read (which would stack the labels).
        for line in text.splitlines()[1:]:
            match = _LABELLED_RE.match(line)
            if match:
                kind = _LABEL_KINDS[match.group(1)]
                found.append((kind, match.group(2), kind in ("request", "constraint")))
    elif role == "user":
        if not text.startswith(_HEADERS):
            request = first_line(text)
            if request:
                found.append(("request", request, True))
        for sentence in _sentences(text):
            if _CONSTRAINT_RE.search(sentence) and not sentence.startswith(_HEADERS):
                found.append(("constraint", _clip(sentence), True))
        found.extend(("path", p, False) for p in find_paths(text))
        found.extend(("error", line, False) for line in _error_lines(text))
        found.extend(("todo", line, False) for line in _todo_lines(text))
    elif role == "assistant":
        found.extend(("path", p, False) for p in find_paths(f"{text}\n{args}" if args else text))
        found.extend(("todo", line, False) for line in _todo_lines(text))
    else:  # tool output: its errors and its ref
        found.extend(("error", line, False) for line in _error_lines(text))
        if output_ref:
            found.append(("ref", output_ref, False))
    if "ref" in text:
        found.extend(("ref", ref, False) for ref in _REF_RE.findall(text))
    result = tuple(found)
    if len(_CACHE) >= _CACHE_SIZE:
        _CACHE.clear()
    _CACHE[key] = result
    return result


def extract_key_facts(messages: Sequence[Message], *, max_facts: int = MAX_FACTS) -> list[KeyFact]:
    """The key facts of ``messages``, deduplicated, in message order.

    Requests and constraints come first when the cap is reached: they are what
    the user asked for and cannot be recovered from any tool.
    """
    seen: set[tuple[str, str]] = set()
    primary: list[KeyFact] = []
    secondary: list[KeyFact] = []
    for msg in messages:
        count: dict[str, int] = {}
        from_ref = msg.output_ref if msg.role == "tool" else None
        args = _arguments_text(msg) if msg.tool_calls else ""
        found = _message_facts(msg.role, msg.context_text, args, msg.output_ref)
        for kind, text, is_primary in found:
            text = text.strip()
            if not text or count.get(kind, 0) >= MAX_PER_MESSAGE:
                continue
            key = (kind, normalize(text))
            if key in seen:
                continue
            seen.add(key)
            count[kind] = count.get(kind, 0) + 1
            fact = KeyFact(kind=kind, text=text, seq=msg.seq, from_ref=from_ref)
            (primary if is_primary else secondary).append(fact)
    facts = primary[:max_facts]
    facts.extend(secondary[: max(0, max_facts - len(facts))])
    order = {id(f): i for i, f in enumerate(primary + secondary)}
    facts.sort(key=lambda f: (f.seq if f.seq is not None else -1, order[id(f)]))
    return facts


@dataclass(slots=True)
class WindowText:
    """The new window, normalised once for many lookups."""

    text: str
    words: frozenset[str]

    @classmethod
    def of(cls, retain: str, summary: str, messages: Iterable[Message]) -> WindowText:
        parts = [retain, summary]
        for msg in messages:
            parts.append(msg.context_text)
            if msg.output_ref:
                parts.append(f"ref={msg.output_ref}")
            if msg.tool_calls:
                parts.append(_arguments_text(msg))
        text = normalize("\n".join(parts))
        return cls(text=text, words=frozenset(_WORD_RE.findall(text)))


def _content_words(text: str) -> set[str]:
    return {w for w in _WORD_RE.findall(text.lower()) if w not in _STOPWORDS}


def fact_survives(fact: KeyFact, window: WindowText) -> bool:
    needle = normalize(fact.text.rstrip("…"))
    if needle in window.text:
        return True
    if fact.kind in ("path", "ref"):
        return False
    words = _content_words(needle)
    if len(words) < 2:
        return False
    # Identifiers (mod0, issue_42, v2) tell near-identical requests apart: all must be there.
    if any(w not in window.words for w in words if _IDENT_RE.search(w)):
        return False
    found = sum(1 for w in words if w in window.words)
    return found / len(words) >= WORD_OVERLAP
