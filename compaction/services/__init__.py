"""Writes for compaction, by topic: request a run, execute it, apply it, restore snapshots.

The shape follows the append path (healthchecks' ``ping``): the slow part —
loading the window and calling the summariser — runs with no lock held, on a
copy of the window up to seq S (``plan``); the result is applied in one short
transaction under the session row lock, and only if the window it was computed
from is still the live one, else it is recomputed (``apply``). Appends that
arrive meanwhile have seqs > S: they stay live after the new summary. A failure
anywhere before the apply leaves the session row exactly as it was
(docs/concepts/compaction.md#summarizer-failure).

Concurrency:

- At most one queued/running compaction per session (a partial unique index
  backs the check made under the session lock); a second request joins it
  (``requests``). The emergency path (``sync.compaction_overflow``) never
  waits behind one.
- A run is *claimed* under its row lock; each claim bumps ``attempts`` and only
  the latest attempt may apply or fail it (``execute``, ``failure``). Its
  holder renews a short lease while it works (``leases.Heartbeat``); a run
  whose lease lapsed (a killed worker) is requeued or failed by whoever looks
  at it next (``requests.compaction_recover``), and a redelivered message with
  its own task id takes it over.

Modules, lowest first: ``policy`` (chain, targets, when to compact),
``window`` (moving the live window), ``failure``, ``requests``, ``plan``,
``apply``, ``execute``, ``sync``; on top ``hooks`` (what the sessions
registry calls), ``tool`` (compact_context) and ``snapshots`` (restore).
"""
