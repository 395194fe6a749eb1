"""Code and docs cite the rules of docs/concepts by anchor, and every anchor cited exists.

The rules are stated in docs/concepts/*.md, each under a heading with an
explicit ``{#anchor}``; a comment says which rule it implements with
``docs/concepts/<page>.md#<anchor>``, a docs page links to it. The source
specifications those rules came from are not part of the repository, so no
file may cite them by number and section.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIP = {".git", ".venv", "node_modules", "var", "vendor", "__pycache__", ".ruff_cache"}
TEXT = {".py", ".html", ".md", ".sh", ".txt", ".toml", ".yml", ".yaml", ".cfg", ".js", ".css"}

SPEC_CITATION = re.compile(r"(?i)\bspecs?\s+(?:00[0-4]\b|§)")
CODE_ANCHOR = re.compile(r"\b(docs/[\w./-]+\.md)#([\w-]+)")
MD_LINK = re.compile(r"\]\(([^)\s#]+\.md)#([\w-]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$")
ATTR_ID = re.compile(r"\{[^}]*#([\w-]+)[^}]*\}\s*$")
HTML_ID = re.compile(r"""<a\s+(?:name|id)=["']([\w-]+)["']""")


def text_files() -> list[Path]:
    found = []
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if any(part in SKIP or part.endswith(".egg-info") for part in rel.parts):
            continue
        if path.suffix in TEXT and path.is_file():
            found.append(path)
    return found


def slug(title: str) -> str:
    """The id Python-Markdown's toc gives a heading without an explicit one."""
    text = re.sub(r"<[^>]+>", "", title)
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


@cache
def anchors(page: Path) -> frozenset[str]:
    """Every id a page's headings (explicit ``{#id}`` or generated) and ``<a id>`` define."""
    ids: set[str] = set()
    fence = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        ids.update(HTML_ID.findall(line))
        heading = HEADING.match(line)
        if not heading:
            continue
        title = heading.group(1)
        explicit = ATTR_ID.search(title)
        if explicit:
            ids.add(explicit.group(1))
        else:
            ids.add(slug(title))
    return frozenset(ids)


def cited_anchors() -> list[tuple[str, Path, str]]:
    """(where, page, anchor) for every docs anchor cited in code or linked from a page."""
    cited = []
    for path in text_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        rel = path.relative_to(ROOT)
        for n, line in enumerate(text.splitlines(), 1):
            where = f"{rel}:{n}"
            if path.suffix == ".md":
                for target, anchor in MD_LINK.findall(line):
                    if "://" not in target:
                        cited.append((where, (path.parent / target).resolve(), anchor))
            else:
                for target, anchor in CODE_ANCHOR.findall(line):
                    cited.append((where, (ROOT / target).resolve(), anchor))
    return cited


def test_no_file_cites_the_source_specs() -> None:
    here = Path(__file__).resolve()
    hits = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in text_files()
        if path.resolve() != here
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if SPEC_CITATION.search(line)
    ]
    assert not hits, "cite the docs' rule anchors (docs/concepts/…md#…) instead:\n" + "\n".join(
        hits
    )


def test_every_cited_anchor_exists() -> None:
    cited = cited_anchors()
    # The rules are cited from the code: an empty list means the scan itself broke.
    assert sum(1 for _, page, _ in cited if page.parent.name == "concepts") > 100
    missing = [
        f"{where}: {page.relative_to(ROOT)}#{anchor}"
        for where, page, anchor in cited
        if not page.is_file() or anchor not in anchors(page)
    ]
    assert not missing, "anchors cited but not defined:\n" + "\n".join(missing)


def test_concept_anchors_are_unique_per_page() -> None:
    for page in sorted((ROOT / "docs" / "concepts").glob("*.md")):
        ids = re.findall(r"\{#([\w-]+)\}", page.read_text(encoding="utf-8"))
        assert ids, f"{page.name} states no rule with an anchor"
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        assert not duplicates, f"{page.name}: anchors defined twice: {duplicates}"


def test_slug_matches_markdown_toc() -> None:
    # The generated ids pages link to (e.g. api.md's "Token estimates").
    assert slug("Token estimates") == "token-estimates"
    assert slug("What caching saved: `budget.cache`") == "what-caching-saved-budgetcache"
    assert slug("Reaching what left the context: `history_search`") == (
        "reaching-what-left-the-context-history_search"
    )
