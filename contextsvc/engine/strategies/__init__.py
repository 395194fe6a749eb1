"""Compaction strategies and the chain that runs them (spec 000 §2, spec 002, spec 003, spec 004).

Pure: a ``Window`` (retain, summary, live messages) goes in, a new ``Window``
and a report (tokens and messages before/after) come out. The Django layer
loads the window, runs a chain here, and writes the result back.

- ``base`` — the window, the token counter, the config, reports and outcomes;
- ``cuts`` — where a strategy may cut: safe turn boundaries, the open-call floor;
- ``clearing`` — ``tool_clearing``, spec 002's first link, with the knobs of
  Anthropic's context editing: keep the N most recent tool uses,
  ``exclude_tools``, ``clear_at_least``, optionally clear tool inputs. Old
  results become ``[tool output cleared; ref=…]``; the ref keeps them expandable;
- ``summary`` — ``summarize``, spec 000 §2.6-2.7: retain + summary of everything
  but the last ``retain_last_turns`` turns, from an LLM called without tools;
- ``sandwich`` — spec 004: top 5 / bottom 5 messages kept, the middle
  compressed, the summary cached with its ``summary_range``;
- ``dropping`` — ``drop_oldest_turns``, spec 003's emergency path: the oldest
  ~50 % of the turns go; a single turn falls back to the most recent user
  message; a compression note goes into the summary, not into the history;
- ``sliding`` — spec 004's ``sliding_window`` and ``full_history``;
- ``tree`` — spec 004's tree summaries: each chunk summarised once, summaries
  of summaries above them (``chunk_size``, ``levels``);
- ``chain`` — the strategy names, ``validate_chain`` and ``run_chain``.

Invariants every strategy keeps (property-tested): a tool result never loses
its call (cuts go through ``engine.turns`` and ``cuts``, and never pass a call
of the last turn that is still waiting for its result), the order of messages
is kept, kept messages are byte-identical, and the window never grows: a
result bigger than its input is discarded.
"""
