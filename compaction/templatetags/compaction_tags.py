"""Filters of the compaction panels: predicted vs actual, facts at risk, summary credit, why."""

from __future__ import annotations

from typing import Any

from django import template

from compaction.dashboard import predictions
from compaction.models import CompactionRun
from compaction.reason_text import reason_text

register = template.Library()


@register.filter
def comparison(run: CompactionRun) -> list[predictions.ComparisonRow]:
    return predictions.run_comparison(run)


@register.filter
def fact_groups(retention: dict[str, Any] | None) -> predictions.FactGroups | None:
    return predictions.fact_groups(retention)


@register.filter
def summary_credit(run: CompactionRun) -> str:
    return predictions.summary_credit(run.summarizer, run.model)


@register.filter
def reason_sentence(run: CompactionRun) -> str:
    """docs/concepts/compaction.md#reasons: the run's reason as a sentence ("" for older runs)."""
    return reason_text(run.reason)
