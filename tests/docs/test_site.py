"""The documentation site builds with ``mkdocs build --strict`` and every link in it,
and in the README, leads somewhere that exists: a page, a file, an anchor on a page.

mkdocs' own validation (mkdocs.yml ``validation``: links, anchors, pages left out of
the nav, all warnings that --strict makes errors) checks the Markdown; the crawl
below checks the built HTML as a reader gets it (the theme's links included), and
the README, which is not part of the site, against the built pages. No network.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
IN_CI = os.environ.get("CI", "").lower() in ("true", "1")

if not IN_CI:  # in CI a missing mkdocs is a failure, never a skip
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (bin/setup installs it)")
    pytest.importorskip("material", reason="mkdocs-material is not installed")


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=config.parent,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = mkdocs_build(ROOT / "mkdocs.yml", out)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr}"
    assert "WARNING" not in done.stderr, done.stderr
    return out


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name == "id" and value:
                self.ids.add(value)
            if value is not None and (
                (name == "href" and tag in ("a", "link")) or (name == "src" and tag == "img")
            ):
                self.links.append(value)


def _parse(path: Path) -> _Links:
    parser = _Links()
    parser.feed(path.read_text(errors="replace"))
    return parser


def _target(page: Path, url: str, site: Path) -> Path:
    """The file a relative URL on ``page`` names (a directory means its index.html)."""
    target = (page.parent / unquote(urlsplit(url).path)).resolve()
    if target.is_dir() or url.split("#")[0].endswith("/"):
        target = target / "index.html"
    return target


def broken_links(site: Path) -> list[str]:
    """Every internal link of the built site whose file or anchor does not exist."""
    pages = {path: _parse(path) for path in site.rglob("*.html")}
    broken = []
    for page, parsed in pages.items():
        if page == site / "404.html":
            continue  # served for any missing path: its links are from the server's root
        for url in parsed.links:
            parts = urlsplit(url)
            if parts.scheme or parts.netloc or url.startswith(("mailto:", "javascript:")):
                continue  # outside the site: not checked (no network)
            target = _target(page, url, site) if parts.path else page
            where = f"{page.relative_to(site)}: {url}"
            if not target.exists():
                broken.append(f"{where} (no {target})")
            elif parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{where} (no anchor #{parts.fragment})")
    return broken


def test_the_built_site_has_no_broken_link_or_anchor(site):
    assert (site / "index.html").exists()
    assert (site / "reference" / "api" / "index.html").exists()
    assert broken_links(site) == []


def test_the_crawl_finds_a_broken_anchor_and_a_missing_page(tmp_path):
    page = tmp_path / "guide" / "index.html"
    page.parent.mkdir()
    page.write_text(
        '<h1 id="top">x</h1><a href="#top">ok</a><a href="#nowhere">bad anchor</a>'
        '<a href="../missing/">bad page</a><a href="https://example.org/">outside</a>'
    )
    assert broken_links(tmp_path) == [
        "guide/index.html: #nowhere (no anchor #nowhere)",
        f"guide/index.html: ../missing/ (no {tmp_path / 'missing' / 'index.html'})",
    ]


def test_strict_build_refuses_a_broken_anchor_and_a_page_outside_the_nav(tmp_path):
    """The site's own validation settings, on a two-page site with one bad anchor
    and a page missing from the nav: --strict must fail and name both."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the guard](guard.md#no-such-rule).\n")
    (docs / "guard.md").write_text("# Guard\n\n## Effective limit\n")
    (docs / "orphan.md").write_text("# Orphan\n")
    config.update(docs_dir="docs", nav=[{"Home": "index.md"}, {"Guard": "guard.md"}])
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    done = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0
    assert "#no-such-rule" in done.stderr
    assert "orphan.md" in done.stderr


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def test_every_readme_link_resolves(site):
    """The README is read on the forge, beside the files: each relative link names a
    file of the repository, and an anchor into a docs page names a heading on it."""
    links = LINK.findall((ROOT / "README.md").read_text())
    local = [url for url in links if not urlsplit(url).scheme]
    assert any(url.startswith("docs/") for url in local)
    broken = []
    for url in local:
        parts = urlsplit(url)
        target = (ROOT / unquote(parts.path)).resolve() if parts.path else ROOT / "README.md"
        if not target.exists():
            broken.append(f"{url}: no {target.relative_to(ROOT)}")
        elif parts.fragment and target.suffix == ".md" and ROOT / "docs" in target.parents:
            page = target.relative_to(ROOT / "docs").with_suffix("")
            built = site / (page.parent if page.name == "index" else page) / "index.html"
            if unquote(parts.fragment) not in _parse(built).ids:
                broken.append(f"{url}: no anchor on {target.relative_to(ROOT)}")
    assert broken == []
