"""The doc tests' summary: blocks executed against the service, and blocks marked not run."""

from __future__ import annotations

import json
from collections import Counter

from tests.docs.blocks import NOT_RUN_KINDS, blocks, pages
from tests.live_server import ROOT

RESULTS: list[tuple[str, bool]] = []  # (page:line, passed), as the blocks ran


def summary() -> tuple[str, dict]:
    """One line for the terminal, and the record (``test-artifacts/doc-examples.json``)."""
    marked = [b for p in pages(ROOT) for b in blocks(p, ROOT) if b.kind in NOT_RUN_KINDS]
    passed = sum(1 for _, ok in RESULTS if ok)
    kinds = Counter(b.kind for b in marked)
    line = (
        f"doc examples: {passed} blocks executed ({len(RESULTS) - passed} failed), "
        f"{len(marked)} marked not run ("
        + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
        + ")"
    )
    record = {
        "executed": [where for where, ok in RESULTS if ok],
        "failed": [where for where, ok in RESULTS if not ok],
        "marked": [{"where": b.where, "kind": b.kind, "why": b.why} for b in marked],
    }
    return line, record


def write_record(record: dict) -> None:
    out = ROOT / "test-artifacts"
    out.mkdir(exist_ok=True)
    (out / "doc-examples.json").write_text(json.dumps(record, indent=1) + "\n")
