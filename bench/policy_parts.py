"""The parts of bench_policy.py that stand alone: the recorded trajectories as an
agent posts them, the context as it is sent (in the trajectories' shape), a row
of the results table, and the planner's own timing."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def api_message(m: dict) -> dict:
    """A recorded message as an agent posts it."""
    out: dict[str, Any] = {"role": m["role"], "content": m.get("content") or ""}
    if m.get("tool_calls"):
        out["tool_calls"] = [
            {"id": c["id"], "name": c.get("name") or "tool", "arguments": c.get("arguments") or {}}
            for c in m["tool_calls"]
        ]
    if m["role"] == "tool":
        out["tool_call_id"] = m.get("tool_call_id")
        if m.get("name"):
            out["name"] = m["name"]
    return out


def sent_messages(body: dict) -> tuple[list[dict], str]:
    """The context's messages in the trajectories' shape (what ``peers.tok`` counts), and
    the system text; cache markers and ids of the body are not content."""
    out, system = [], []
    for m in body["messages"]:
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
        content = content or ""
        if m["role"] in ("system", "developer"):
            system.append(content)
            continue
        msg: dict[str, Any] = {"role": m["role"], "content": content}
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                fn = c.get("function") or {}
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except ValueError:
                    args = {"_raw": fn.get("arguments")}
                calls.append({"id": c.get("id"), "name": fn.get("name"), "arguments": args})
            msg["tool_calls"] = calls
        if m["role"] == "tool":
            msg["tool_call_id"] = m.get("tool_call_id")
        out.append(msg)
    return out, "\n".join(system)


def row(name: str, a: dict, ref: float | None) -> str:
    rel = f" ({a['cost'] / ref:.2f}×)" if ref else ""
    return (
        f"| {name} | {a['calls']} | {a['overflows']} | {a['pair_errors']} | {a['sent']:,} | "
        f"{a['cost']:,.0f}{rel} | {a['retention']:.2f} | {a['recall']:.3f} |"
    )


def planner_timing() -> None:
    """What one planner decision costs on a replayed session (its numbers are cached
    counters: no query), p50 over 2,000 decisions."""
    from compaction.services.policy import plan_decision, resolve_chain
    from sessions import accounting
    from sessions.models import Session

    session = Session.objects.order_by("-last_seq").first()
    if session is None:
        return
    state = accounting.compute_budget(session)
    chain = resolve_chain(session, None)
    times = []
    for _ in range(2_000):
        t0 = time.perf_counter()
        plan_decision(session, state, chain)
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    print(
        f"planner decision (policy read + planner): p50 {times[len(times) // 2]:.4f} ms, "
        f"p99 {times[int(len(times) * 0.99)]:.4f} ms"
    )
