"""Compaction strategies and the chain that runs them (docs/concepts/compaction.md#chain).

Pure: a ``Window`` (retain, summary, live messages) goes in, a new ``Window``
and a report (tokens and messages before/after) come out. The Django layer
loads the window, runs a chain here, and writes the result back.

- ``base`` — the window, the token counter, the config, reports and outcomes;
- ``cuts`` — where a strategy may cut: safe turn boundaries, the open-call floor;
- ``clearing`` — ``tool_clearing``, the chain's first link
  (docs/concepts/compaction.md#tool-clearing), with the knobs of Anthropic's context editing: keep
  the N most recent tool uses, ``exclude_tools``, ``clear_at_least``, optionally clear tool inputs.
  Old results become ``[tool output cleared; ref=…]``; the ref keeps them expandable;
- ``summary`` — ``summarize``, docs/concepts/compaction.md#retain-summary: retain + summary of
  everything but the last ``retain_last_turns`` turns, from an LLM called without tools;
- ``sandwich`` — docs/concepts/compaction.md#sandwich: top 5 / bottom 5 messages kept, the middle
  compressed, the summary cached with its ``summary_range``;
- ``dropping`` — ``drop_oldest_turns``, the emergency path (docs/concepts/compaction.md#emergency):
  the oldest ~50 % of the turns go; a single turn falls back to the most recent user
  message; a compression note goes into the summary, not into the history;
- ``sliding`` — ``sliding_window`` and ``full_history``
  (docs/concepts/compaction.md#sliding-window);
- ``tree`` — the tree summaries (docs/concepts/compaction.md#tree): each chunk summarised once,
  summaries of summaries above them (``chunk_size``, ``levels``);
- ``chain`` — the strategy names, ``validate_chain`` and ``run_chain``.

Invariants every strategy keeps (property-tested): a tool result never loses
its call (cuts go through ``engine.turns`` and ``cuts``, and never pass a call
of the last turn that is still waiting for its result), the order of messages
is kept, kept messages are byte-identical, and the window never grows: a
result bigger than its input is discarded.
"""
