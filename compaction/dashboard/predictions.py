"""Predicted vs actual for a compaction run, facts at risk by kind of loss, and who wrote the summary.

The prediction is the dashboard's dry run (``compaction_preview``) stored on the
run when it was requested (``CompactionRun.prediction``); the actual figures are
the run's own. Pure functions of those two records: no query.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from compaction.models import CompactionRun

from .selectors import CompactionPreview

WRITES_SUMMARY = {"summarize", "sandwich", "tree"}  # the strategies that ask a summariser


def preview_prediction(preview: CompactionPreview) -> dict[str, Any]:
    """The preview's figures as stored with the run (JSON)."""
    return {
        "changed": preview.changed,
        "before_tokens": preview.before_tokens,
        "after_tokens": preview.after_tokens,
        "before_msgs": preview.before_msgs,
        "after_msgs": preview.after_msgs,
        "strategies_run": preview.strategies_run,
        "removed_count": preview.removed_count,
        "retention": preview.retention,
        "summarizer": preview.summarizer_name,
        "summary_model": preview.summary_model,
    }


@dataclass(slots=True)
class FactGroups:
    """Facts a compaction takes out of the context, by what is left of them.

    ``by_ref``: they came from (or are) a stored tool output, which stays in the
    store: ``tool_output_cache`` with the ref brings them back. ``gone``: said
    only in the removed messages; the transcript keeps them, the model no longer
    sees them. ``recoverable``: counted as kept, their ref is still in the window.
    """

    by_ref: list[dict[str, Any]] = field(default_factory=list)
    gone: list[dict[str, Any]] = field(default_factory=list)
    recoverable: int = 0
    lost_count: int = 0  # may exceed the listed facts (the record keeps the first 100)

    @property
    def unlisted(self) -> int:
        return max(0, self.lost_count - len(self.by_ref) - len(self.gone))


def fact_groups(retention: dict[str, Any] | None) -> FactGroups | None:
    if not retention:
        return None
    groups = FactGroups(
        recoverable=int(retention.get("recoverable") or 0),
        lost_count=int(retention.get("lost_count") or 0),
    )
    for fact in retention.get("lost") or []:
        if fact.get("kind") == "ref" or fact.get("from_ref"):
            groups.by_ref.append(fact)
        else:
            groups.gone.append(fact)
    return groups


def summary_credit(summarizer: str, model: str) -> str:
    """Who wrote a summary, in words; the offline summariser is never credited with a model."""
    if not summarizer:
        return "no summary written"
    if summarizer == "offline":
        return "offline summariser (deterministic, no model)"
    return f"{summarizer} summariser · {model}" if model and model != summarizer else summarizer


@dataclass(frozen=True, slots=True)
class ComparisonRow:
    label: str
    predicted: str
    actual: str  # "…" until the run ends
    differs: bool


def _pct_saved(before: int | None, after: int | None) -> str:
    if not before or after is None:
        return "—"
    return f"−{round(100 * (before - after) / before, 1)}%"


def _lost(retention: dict[str, Any] | None) -> str:
    if not retention:
        return "—"
    groups = fact_groups(retention)
    assert groups is not None
    return f"{groups.lost_count} ({len(groups.by_ref)} by ref, {len(groups.gone)} gone)"


def run_comparison(run: CompactionRun) -> list[ComparisonRow]:
    """Predicted vs actual, row by row; empty without a prediction."""
    p = run.prediction
    if not p:
        return []
    done = run.status == CompactionRun.Status.SUCCEEDED
    failed = run.status == CompactionRun.Status.FAILED

    def actual(value: Any) -> str:
        if failed:
            return "failed"
        return str(value) if done else "…"

    predicted_summary = summary_credit(
        p.get("summarizer", "") if WRITES_SUMMARY & set(p.get("strategies_run") or []) else "",
        p.get("summary_model", ""),
    )
    rows = [
        ("Tokens after", f"{p.get('after_tokens', 0):,}", actual(f"{run.after_tokens or 0:,}")),
        (
            "Saved",
            _pct_saved(p.get("before_tokens"), p.get("after_tokens")),
            actual(_pct_saved(run.before_tokens, run.after_tokens)),
        ),
        ("Messages after", f"{p.get('after_msgs', 0):,}", actual(f"{run.after_msg_count or 0:,}")),
        (
            "Strategies",
            " → ".join(p.get("strategies_run") or []) or "none",
            actual(" → ".join(run.strategies_run or []) or "none"),
        ),
        (
            "Retention",
            f"{(p.get('retention') or {}).get('score', 1.0):.2f}",
            actual(f"{run.retention_score:.2f}" if run.retention_score is not None else "—"),
        ),
        ("Facts at risk", _lost(p.get("retention")), actual(_lost(run.retention))),
        ("Summary by", predicted_summary, actual(summary_credit(run.summarizer, run.model))),
    ]
    return [ComparisonRow(label, pred, act, done and pred != act) for label, pred, act in rows]
