"""The retention check a compaction reports: which key facts survive, and which the agent can still reach.

A fact survives when the new window holds it (``retention.fact_survives``).
Of the others, a fact counts as recoverable only when reaching it was tested:
the recall search the session offers finds its text (``searchable``, wired by
the compaction service), or, where the session offers no search, its output
ref is still in the window (the ref tools read it). The rest is lost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextsvc.engine.retention import KeyFact, WindowText, fact_survives, normalize


@dataclass(slots=True)
class RetentionReport:
    total: int
    kept: int
    recoverable: int
    lost: list[KeyFact] = field(default_factory=list)

    @property
    def score(self) -> float:
        """Share of facts kept or recoverable; 1.0 when there was nothing to keep."""
        if self.total == 0:
            return 1.0
        return round((self.kept + self.recoverable) / self.total, 4)

    def to_dict(self, *, max_lost: int = 100) -> dict[str, Any]:
        by_kind: dict[str, int] = {}
        for fact in self.lost:
            by_kind[fact.kind] = by_kind.get(fact.kind, 0) + 1
        return {
            "score": self.score,
            "total": self.total,
            "kept": self.kept,
            "recoverable": self.recoverable,
            "lost_count": len(self.lost),
            "lost_by_kind": by_kind,
            "lost": [f.to_dict() for f in self.lost[:max_lost]],
        }


def check_retention(
    facts: Sequence[KeyFact],
    window: WindowText,
    *,
    searchable: Callable[[Sequence[str]], set[str]] | None = None,
) -> RetentionReport:
    """Which ``facts`` survive in ``window``; of the others, which the agent can still reach.

    With ``searchable`` (the recall search the session offers: of these texts,
    those it finds) that is tested fact by fact; without it, a fact whose
    output ref is still in the window counts (the ref can be read).
    """
    report = RetentionReport(total=len(facts), kept=0, recoverable=0)
    missing = [f for f in facts if not fact_survives(f, window)]
    report.kept = len(facts) - len(missing)
    if searchable is None:
        reached = [bool(f.from_ref and normalize(f.from_ref) in window.text) for f in missing]
    else:
        found = searchable([search_text(f) for f in missing]) if missing else set()
        reached = [search_text(f) in found for f in missing]
    for fact, ok in zip(missing, reached, strict=True):
        if ok:
            report.recoverable += 1
        else:
            report.lost.append(fact)
    return report


def search_text(fact: KeyFact) -> str:
    """What a search for ``fact`` looks for: its text without the clipping mark."""
    return fact.text.rstrip("…").strip()
