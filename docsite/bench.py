"""docs/benchmarks.md's tables from the benches' own figures.

Each bench under bench/ writes what it prints to var/bench/<bench>.json (bench/common.py,
``figure`` and ``recording``). The page holds one block per bench between
``<!-- figures:NAME -->`` and ``<!-- /figures -->``; this module replaces those blocks
with a table of the newest figures, leaving the prose around them alone.

    bin/docs bench                       # the tables from the JSON already in var/bench
    bin/docs bench --run                 # run every bench on the page first (a long while)
    bin/docs bench --run bench_tokens …  # run only these, refresh only their tables
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "benchmarks.md"
BENCH_DIR = ROOT / "bench"
JSON_DIR = Path(os.environ.get("BENCH_JSON_DIR") or ROOT / "var" / "bench")

BLOCK = re.compile(
    r"(?P<open><!-- figures:(?P<name>[\w.-]+) -->\n)(?P<body>.*?)(?P<close><!-- /figures -->)",
    re.S,
)


def benches_on_page(text: str) -> list[str]:
    """The benches the page has a table for, in page order."""
    return [m["name"] for m in BLOCK.finditer(text)]


def _cell(text: str) -> str:
    """One table cell: pipes and raw HTML escaped outside code spans."""
    parts = re.split(r"(`[^`]*`)", " ".join(str(text).split()))
    return "".join(
        part
        if part.startswith("`")
        else part.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
        for part in parts
    )


def table(data: dict[str, Any]) -> str:
    """A bench's figures as Markdown: when and on what, then a measure / result table."""
    load = data.get("load") or ["?", "?"]
    lines = [
        f"Measured {data['date']} on {data['cpus']} CPUs (load average {load[0]} at the start,"
        f" {load[1]} at the end), {data['seconds']} s.",
        "",
        "| measure | result |",
        "|---|---|",
    ]
    lines += [
        f"| {_cell(row['measure'])} | {_cell(row['result'])} |" for row in data.get("figures", [])
    ]
    return "\n".join(lines) + "\n"


def placeholder(name: str) -> str:
    return f"No figures yet: `bin/docs bench --run {name}`.\n"


def rewrite(text: str, figures: dict[str, dict[str, Any]]) -> str:
    """``text`` with the block of every bench in ``figures`` replaced by its table."""

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in figures:
            return match.group(0)
        return match["open"] + "\n" + table(figures[name]) + "\n" + match["close"]

    return BLOCK.sub(replace, text)


def load(name: str) -> dict[str, Any] | None:
    path = JSON_DIR / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def run(name: str) -> bool:
    """Run one bench (its figures land in JSON_DIR); True when it finished cleanly."""
    print(f"bench: running {name}…", flush=True)
    started = time.perf_counter()
    env = {**os.environ, "BENCH_JSON_DIR": str(JSON_DIR)}
    done = subprocess.run([sys.executable, str(BENCH_DIR / f"{name}.py")], cwd=ROOT, env=env)
    took = time.perf_counter() - started
    print(f"bench: {name} {'done' if done.returncode == 0 else 'FAILED'} in {took:.0f} s")
    return done.returncode == 0


def main(argv: list[str]) -> int:
    run_first = "--run" in argv
    names = [a for a in argv if not a.startswith("-")]
    text = PAGE.read_text()
    known = benches_on_page(text)
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"not on {PAGE.name}: {', '.join(unknown)} (known: {', '.join(known)})")
        return 2
    names = names or known
    failed = [n for n in names if run_first and not run(n)]
    figures = {n: data for n in names if n not in failed and (data := load(n)) is not None}
    # Read again: the page may have been edited while the benches ran.
    PAGE.write_text(rewrite(PAGE.read_text(), figures))
    missing = sorted(set(names) - set(figures))
    print(f"{PAGE.relative_to(ROOT)}: {len(figures)} table(s) rewritten")
    if missing:
        print(f"no figures for: {', '.join(missing)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
