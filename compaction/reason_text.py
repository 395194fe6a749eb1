"""A run's reason (``compaction.reasons``) as one sentence with its numbers, for the run
card and the API's ``reason_text`` (docs/concepts/compaction.md#reasons).

Reasons are stored JSON, written by older and newer versions alike: nothing
here may raise on a missing or odd key, and ``{}`` (a run recorded before
reasons were) has no sentence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

CHECKS = {
    "assistant": "an assistant message",
    "tool": "tool results",
    "usage": "a usage report",
}
CLIENT_FORMS = {
    "checkpoint": "Codex's checkpoint request",
    "trigger": "a compaction_trigger item",
    "compact": "POST /responses/compact",
}


def _n(value: Any) -> str:
    """12345 → '12,345'; None → '?'; anything else as it is."""
    if value is None:
        return "?"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if value >= 100 else f"{value:.2g}"
    return str(value)


def _parts(r: dict[str, Any]) -> str:
    """What ``used`` is made of, when it is more than the history (what a run card's
    before/after counts)."""
    if "history" not in r:
        return ""
    parts = [f"{_n(r['history'])} history"]
    for key, label in (
        ("fixed", "system, skills and tools"),
        ("calibration", "more counted by the provider than estimated"),
        ("reserved", "reserved for tool outputs"),
        ("extra", "asked for by the call"),
    ):
        if r.get(key):
            parts.append(f"{_n(r[key])} {label}")
    if len(parts) == 1:
        return ""
    return " (" + " + ".join(parts) + ")"


def _at(r: dict[str, Any]) -> str:
    """Where the context stood, for a run no line decided."""
    if "used" not in r:
        return ""
    line = f", compact-at {_n(r['compact_at'])}" if "compact_at" in r else ""
    return f" (at {_n(r['used'])} used{line})"


def _tier(r: dict[str, Any]) -> str:
    tier = r.get("tier")
    if tier == "block" and "block_at" in r:
        return f", past the {_n(r['block_at'])} block line"
    if tier == "final" and "window" in r:
        return f", over the {_n(r['window'])} limit"
    return ""


def _threshold(r: dict[str, Any]) -> str:
    text = (
        f"threshold crossed: {_n(r.get('used'))} used ≥ {_n(r.get('threshold'))} compact-at"
        f"{_tier(r)}{_parts(r)}"
    )
    check = CHECKS.get(str(r.get("check")))
    return f"{text}, seen after {check}" if check else text


def _planner(r: dict[str, Any]) -> str:
    if r.get("action") == "clear":
        return (
            f"the cost planner cleared old tool outputs (about {_n(r.get('clearable'))} tokens):"
            f" cheaper than waiting, at {_n(r.get('used'))} used, below the"
            f" {_n(r.get('compact_at'))} compact-at{_parts(r)}"
        )
    return (
        f"the cost planner found compacting pays: {_n(r.get('used'))} used ≥"
        f" {_n(r.get('threshold'))} (its cheapest-cycle trigger: floor {_n(r.get('floor'))}"
        f" + growth for ~{_n(r.get('per_call'))} tokens a call), below the"
        f" {_n(r.get('compact_at'))} compact-at{_parts(r)}"
    )


def _ratio(r: dict[str, Any]) -> str:
    setting = r.get("setting") or "threshold_ratio"
    return (
        f"fixed trigger crossed: {_n(r.get('used'))} used ≥ {_n(r.get('threshold'))}"
        f" ({r.get('ratio')} of the {_n(r.get('window'))} window, policy {setting}),"
        f" below the {_n(r.get('compact_at'))} compact-at{_parts(r)}"
    )


def _tool_overflow(r: dict[str, Any]) -> str:
    if r.get("output_tokens") is not None:
        text = f"an output of {_n(r['output_tokens'])} tokens did not fit"
        if r.get("view") == "trimmed":
            text += f" (shown as a {_n(r.get('kept_tokens'))}-token placeholder)"
        elif r.get("kept_tokens") is not None:
            text += f" even cut to {_n(r['kept_tokens'])}"
    else:
        text = "a tool output did not fit"
    return (
        f"{text}: the context stood at {_n(r.get('used'))} > {_n(r.get('window'))} limit,"
        f" so compaction was due at once, whatever the tier{_parts(r)}"
    )


def _preflight(r: dict[str, Any]) -> str:
    return (
        f"the context was at {r.get('tier')} before a call: {_n(r.get('used'))} used ≥"
        f" {_n(r.get('threshold'))} block-at; compacted in the request{_parts(r)}"
    )


def _overflow(r: dict[str, Any]) -> str:
    if r.get("source") == "proxy":
        text = "upstream answered context overflow"
    else:
        text = "the client reported a context overflow (POST /overflow)"
    if r.get("reported_tokens") is not None and r.get("limit") is not None:
        text += f": the request was {_n(r['reported_tokens'])} tokens > {_n(r['limit'])} maximum"
    elif r.get("reported_tokens") is not None:
        text += f": the provider counted {_n(r['reported_tokens'])} tokens"
    elif r.get("limit") is not None:
        text += f": {_n(r['limit'])} maximum"
    if "used" in r:
        text += f"; our estimate was {_n(r['used'])} of a {_n(r.get('window'))} window"
    if r.get("previous_context_window") is not None:
        text += (
            f"; the session's context window went from {_n(r['previous_context_window'])}"
            f" to {_n(r.get('context_window'))}"
        )
    return text


def _manual(r: dict[str, Any]) -> str:
    if r.get("via") == "dashboard":
        who = f"from the dashboard by operator {r.get('operator') or '?'}"
    else:
        prefix = f" ({r['key_prefix']}…)" if r.get("key_prefix") else ""
        who = f"through the API by key {r.get('key') or '?'}{prefix}"
    return f"manual, {who}{_at(r)}"


def _tool(r: dict[str, Any]) -> str:
    return f"the agent called {r.get('tool') or 'compact_context'}{_at(r)}"


def _client(r: dict[str, Any]) -> str:
    form = CLIENT_FORMS.get(str(r.get("form")))
    how = f", with {form}" if form else ""
    return f"the client compacted its own history{how}{_at(r)}"


SENTENCES: dict[str, Callable[[dict[str, Any]], str]] = {
    "threshold": _threshold,
    "planner": _planner,
    "ratio": _ratio,
    "tool_overflow": _tool_overflow,
    "preflight": _preflight,
    "overflow": _overflow,
    "manual": _manual,
    "tool": _tool,
    "client": _client,
}


def _setting(value: Any) -> str:
    # None: no value stored, the default applied.
    return "default" if value is None else str(value)


def _policy(r: dict[str, Any]) -> str:
    change = r.get("policy_change")
    if not isinstance(change, dict):
        return ""
    items = [
        f"{c.get('field')} {_setting(c.get('old'))} → {_setting(c.get('new'))}"
        for c in change.get("changes") or []
        if isinstance(c, dict)
    ]
    if not items:
        return ""
    return f"; the policy changed since the last compaction ({', '.join(items)}, by {change.get('actor')})"


def reason_text(reason: dict[str, Any] | None) -> str:
    """The sentence, or "" when the run recorded no reason."""
    if not isinstance(reason, dict) or not reason.get("kind"):
        return ""
    sentence = SENTENCES.get(str(reason["kind"]))
    if sentence is None:
        return str(reason["kind"])
    try:
        return sentence(reason) + _policy(reason)
    except (TypeError, ValueError, AttributeError):  # odd stored JSON: say what is known
        return str(reason["kind"])
