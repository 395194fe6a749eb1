"""The cost of a compaction run, as the run record carries it (prompt-cache units).

Counted with the session's token counter on what the run actually did: the
summary requests it sent and the answers it got, the window it left. The
multipliers and the expected calls come from the pure planner.
"""

from __future__ import annotations

from typing import Any

from contextsvc.engine.build import sent_history
from contextsvc.engine.planner import READ, PlanDecision, compaction_cost
from contextsvc.engine.strategies.base import TokenCounter, Window
from contextsvc.engine.strategies.chain import ChainResult

from .. import summarizers


def run_cost(
    *,
    before: Window,
    result: ChainResult,
    summarizer: summarizers.TimedSummarizer,
    counter: TokenCounter,
    decision: PlanDecision | None,
) -> dict[str, Any] | None:
    """``None`` when the run changed nothing."""
    if not result.changed:
        return None
    after = result.window
    # The provider re-writes everything after the first changed message: a
    # pinned retain that did not move stays cached, the rest is written again.
    rewritten = after.tokens(counter)
    if after.retain and after.retain == before.retain:
        rewritten -= counter.messages(after.preamble()[:1])
    summary_in = summary_out = cached = 0
    for request, text in summarizer.exchanges:
        summary_in += counter.messages(request.llm_messages())
        summary_out += counter.text(text)
        if request.prefix is not None:
            cached += counter.messages(sent_history(request.prefix))
    units = (
        compaction_cost(
            summary_input=summary_in - cached,
            summary_tokens=summary_out,
            rewritten=rewritten,
            cached_summary=False,
        )
        + READ * cached
    )
    return {
        "rewritten_tokens": rewritten,
        "summary_input_tokens": summary_in,
        "summary_cached_tokens": cached,
        "summary_output_tokens": summary_out,
        "units": round(units, 1),
        "expected_calls": round(decision.expected_calls, 1) if decision else None,
        "planner": decision.reason if decision else None,
    }
