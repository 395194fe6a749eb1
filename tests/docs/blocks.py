"""The fenced blocks of README.md and docs/**/*.md, and what the doc tests do with each.

A page is one story: its blocks run in order, a later one may use what an
earlier one made (a shell variable, a session, a Python name).

- ``sh`` / ``bash`` / ``shell`` / ``console`` and ``python`` / ``py`` blocks run,
  unless the line right before the fence marks them:
  ``<!-- example: skip — why, and what it needs -->`` (something CI cannot have:
  a real provider key, a Docker engine, a package not installed) or
  ``<!-- example: long-running — why -->`` (a server that runs until Ctrl-C,
  the whole suite, a benchmark). A marked block must also say so where a reader
  sees it: the words "not run by the doc tests" in the block itself or in the
  paragraph just above the marker.
- ``json`` blocks run only when marked as a request body:
  ``<!-- example: session policy -->`` (the block is a session's ``policy``) or
  ``<!-- example: session fields -->`` (fields of ``POST /sessions``); the
  service must accept them. Other ``json`` blocks, and blocks of any other
  language, show a shape or a file and are not examples.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SHELL = frozenset({"sh", "bash", "shell", "console"})
PYTHON = frozenset({"python", "py"})
JSON_KINDS = frozenset({"session policy", "session fields"})
NOT_RUN_KINDS = frozenset({"skip", "long-running"})
VISIBLE = "not run by the doc tests"

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_MARKER = re.compile(
    r"^\s*<!--\s*example:\s*(?P<kind>[a-z]+(?:[ -][a-z]+)*)\s*(?:(?:—|–|:)\s*(?P<why>.*?))?\s*-->\s*$"
)


@dataclass(frozen=True)
class Block:
    page: str  # the path relative to the repository
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    kind: str  # "run", "skip", "long-running", "session policy", "session fields", "other"
    why: str  # a marker's reason
    visible: bool  # the page says, where a reader sees it, that the block is not run

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.kind in ("run", *JSON_KINDS)


def pages(root: Path) -> list[Path]:
    """README.md, then every docs page (sorted)."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def _paragraph_above(lines: list[str], index: int) -> str:
    """The paragraph just above line ``index`` (0-based): blank lines skipped, then up to one."""
    out: list[str] = []
    i = index - 1
    while i >= 0 and not lines[i].strip():
        i -= 1
    while i >= 0 and lines[i].strip():
        out.append(lines[i])
        i -= 1
    return "\n".join(reversed(out))


def _kind(lang: str, marker: re.Match[str] | None) -> tuple[str, str]:
    if marker is not None:
        return marker.group("kind").strip(), (marker.group("why") or "").strip()
    if lang in SHELL or lang in PYTHON:
        return "run", ""
    return "other", ""


def blocks(page: Path, root: Path) -> list[Block]:
    """The fenced blocks of one page, in order."""
    lines = page.read_text().split("\n")
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opened = _FENCE.match(lines[i])
        if opened is None:
            i += 1
            continue
        fence = opened.group("fence")
        lang = opened.group("info").strip().split(" ")[0].lower()
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        body = "\n".join(line[len(opened.group("indent")) :] for line in lines[i + 1 : end])
        marker = _MARKER.match(lines[i - 1]) if i > 0 else None
        kind, why = _kind(lang, marker)
        above = _paragraph_above(lines, i - 1 if marker else i)
        visible = VISIBLE in " ".join(f"{body} {above}".lower().split())
        rel = str(page.relative_to(root))
        found.append(Block(rel, i + 1, lang, body + "\n", kind, why, visible))
        i = end + 1
    return found


def problems(block: Block) -> list[str]:
    """What is wrong with a block's marking (an empty list: nothing)."""
    where = block.where
    if block.kind in NOT_RUN_KINDS:
        out = [] if block.why else [f"{where}: a {block.kind} marker must say why"]
        if not block.visible:
            out.append(f'{where}: a {block.kind} block must say "{VISIBLE}" where a reader sees it')
        return out
    if block.kind in JSON_KINDS and block.lang != "json":
        return [f"{where}: '{block.kind}' marks json blocks only"]
    if block.kind not in ("run", "other", *JSON_KINDS):
        return [f"{where}: unknown marker kind {block.kind!r}"]
    return []
