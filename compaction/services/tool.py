"""The built-in ``compact_context`` tool (docs/concepts/compaction.md#forced-runs): a forced run,
now."""

from __future__ import annotations

from typing import Any

from contextsvc.engine.messages import ToolDef
from contextsvc.errors import ValidationFailed
from sessions.models import Session

from .. import reasons, selectors
from ..models import CompactionRun
from .requests import compaction_request
from .sync import compaction_run_sync, raise_for_failure

Trigger = CompactionRun.Trigger

COMPACT_CONTEXT_TOOL = ToolDef(
    name="compact_context",
    description=(
        "Compact this conversation's context now to free space: old tool outputs are cleared "
        "(their refs stay expandable) and earlier turns are replaced by a summary, keeping the "
        "most recent turn intact. Call it before large operations when the context is filling "
        "up. Returns how many tokens were freed."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "instructions": {
                "type": "string",
                "description": "Optional: what the summary must keep (added to its prompt).",
            }
        },
        "additionalProperties": False,
    },
    category="builtin",
)


def describe(run: CompactionRun) -> str:
    """A finished run in one sentence, for the model."""
    if not run.changed:
        return "Nothing to compact: the context could not be made smaller."
    return (
        f"Context compacted: {run.before_tokens:,} → {run.after_tokens:,} tokens "
        f"({run.before_msg_count} → {run.after_msg_count} messages) using "
        f"{', '.join(run.strategies_run)}."
    )


def compact_context_tool(session: Session, arguments: dict[str, Any]) -> dict[str, Any]:
    """docs/concepts/compaction.md#forced-runs: a forced compaction, run now."""
    instructions = arguments.get("instructions", "")
    if not isinstance(instructions, str):
        raise ValidationFailed("instructions must be a string", details={"field": "instructions"})
    unknown = set(arguments) - {"instructions"}
    if unknown:
        raise ValidationFailed(
            f"Unknown argument(s) for compact_context: {', '.join(sorted(unknown))}",
            details={"field": sorted(unknown)[0]},
        )
    run, _ = compaction_request(
        session=session,
        trigger=Trigger.TOOL,
        reason=reasons.tool_call(session),
        instructions=instructions,
        enqueue=False,
    )
    run = compaction_run_sync(run=run)
    raise_for_failure(run)
    return {
        "result": describe(run) if run.is_finished else "Compaction is still running.",
        "run_id": str(run.pk),
        "status": run.status,
        "compact_result": selectors.compact_result(run),
    }
