"""docs/benchmarks.md: one table per bench, made from the figures each bench writes
(var/bench/<bench>.json) by ``bin/docs bench``."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from docsite import bench as bench_page


def test_every_table_on_the_page_belongs_to_a_bench_that_writes_its_figures():
    text = bench_page.PAGE.read_text()
    names = bench_page.benches_on_page(text)
    assert len(names) >= 13 and len(set(names)) == len(names)
    for name in names:
        source = (bench_page.BENCH_DIR / f"{name}.py").read_text()
        assert "recording(__file__)" in source, name
        assert "figure(" in source or "record(" in source, name


def test_the_page_carries_current_figures_only():
    text = bench_page.PAGE.read_text()
    for word in ("before this", "this round", "used to", "previously", "no longer"):
        assert word not in text.lower(), word


def _figures(name: str, rows: list[tuple[str, str]]) -> dict:
    return {
        "bench": name,
        "date": "2026-01-02",
        "seconds": 12,
        "cpus": 2,
        "load": [1.5, 2.0],
        "figures": [{"measure": m, "result": r} for m, r in rows],
    }


def test_rewrite_replaces_only_the_blocks_it_has_figures_for():
    page = (
        "# B\n\nprose\n\n<!-- figures:bench_a -->\nold a\n<!-- /figures -->\n\n"
        "## b\n<!-- figures:bench_b -->\nold b\n<!-- /figures -->\n"
    )
    out = bench_page.rewrite(page, {"bench_a": _figures("bench_a", [("p50 | p99", "3 ms")])})
    assert "old a" not in out and "old b" in out
    assert "| p50 \\| p99 | 3 ms |" in out
    assert "Measured 2026-01-02 on 2 CPUs (load average 1.5 at the start, 2.0 at the end)" in out
    assert out.startswith("# B\n\nprose\n\n<!-- figures:bench_a -->\n")
    # A second rewrite with the same figures changes nothing.
    assert bench_page.rewrite(out, {"bench_a": _figures("bench_a", [("p50 | p99", "3 ms")])}) == out


def test_a_bench_writes_its_figures_as_json(tmp_path):
    """bench/common.py's figure/recording, as a bench uses them, in a process of its own."""
    script = tmp_path / "bench_demo.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(bench_page.BENCH_DIR)!r})\n"
        "from common import figure, record, recording\n"
        "with recording(__file__):\n"
        "    figure('append p50: 8.1 ms (target ≤ 15)')\n"
        "    figure('a line with no colon')\n"
        "    record('quiet', '42')\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        env={"BENCH_JSON_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "append p50: 8.1 ms" in done.stdout
    data = json.loads((tmp_path / "bench_demo.json").read_text())
    assert data["figures"] == [
        {"measure": "append p50", "result": "8.1 ms (target ≤ 15)"},
        {"measure": "a line with no colon", "result": ""},
        {"measure": "quiet", "result": "42"},
    ]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", data["date"]) and data["cpus"] >= 1
