"""The tree strategy (docs/concepts/compaction.md#tree): each chunk summarised once, summaries of
summaries above them."""

from __future__ import annotations

import pytest

from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.strategies.base import CompactionConfig, Window
from contextsvc.engine.strategies.chain import run_chain, validate_chain
from contextsvc.engine.strategies.pinning import is_pinned_retain
from contextsvc.engine.strategies.tree import FAN_IN, chunks, parse_tree, render_tree, tree
from contextsvc.engine.wellformed import well_formed
from tests.engine.test_strategies import (
    FailingSummarizer,
    FakeSummarizer,
    agent_session,
    ctx,
    numbered,
    pairs_ok,
    unanswered_calls,
)


def cfg(**kw) -> CompactionConfig:
    kw.setdefault("retain_last_turns", 1)
    kw.setdefault("chunk_size", 6)
    return CompactionConfig(**kw)


def summarised_seqs(fake: FakeSummarizer, start: int = 0) -> list[int]:
    """The seqs of the messages the summariser read, call by call from ``start``."""
    return [m.seq for r in fake.requests[start:] for m in r.source if m.seq is not None]


def test_tree_summarises_each_chunk_alone_and_keeps_the_last_turn_cx_tree():
    msgs = agent_session(turns=4)  # 8 messages a turn
    fake = FakeSummarizer()
    out = tree(Window(msgs), ctx(summarizer=fake, config=cfg()))
    assert out.report.applied
    kept = out.window.messages
    assert kept == msgs[-8:]  # the last turn, byte for byte
    # The task is pinned verbatim; the rest of the 3 turns went to the summariser
    # once each, in chunks of about chunk_size that never start with a tool result.
    assert is_pinned_retain(out.window.retain) and msgs[0].text in out.window.retain
    assert sorted(summarised_seqs(fake)) == list(range(2, 25))
    assert all(r.kind == "compress" for r in fake.requests)
    assert all(r.source[0].role != "tool" for r in fake.requests)
    nodes = parse_tree(out.window.summary, 3, kept[0].seq)
    assert [n.level for n in nodes] == [1] * len(fake.requests)
    assert (nodes[0].first, nodes[-1].last) == (2, 24)


def test_a_later_tree_compaction_summarises_only_the_new_chunk():
    msgs = agent_session(turns=3)
    fake = FakeSummarizer()
    config = cfg(chunk_size=20)
    first = tree(Window(msgs[:16]), ctx(summarizer=fake, config=config))
    assert first.report.applied and len(fake.requests) == 1
    # One more turn arrives; the next compaction reads that turn's predecessor
    # (the one that now leaves the window) and nothing older.
    window = Window([*first.window.messages, *msgs[16:]], first.window.retain, first.window.summary)
    calls = len(fake.requests)
    second = tree(window, ctx(summarizer=fake, config=config))
    assert second.report.applied and len(fake.requests) == calls + 1
    assert summarised_seqs(fake, calls) == list(range(9, 17))
    # Nothing already summarised is sent again, not even as a summary.
    assert all(m.role != "user" or "[Summary L" not in m.text for m in fake.requests[-1].source)
    nodes = parse_tree(second.window.summary, 3, second.window.messages[0].seq)
    assert [(n.first, n.last) for n in nodes] == [(2, 8), (9, 16)]
    assert second.window.retain == first.window.retain  # the pinned task, untouched


def test_full_levels_roll_up_into_a_summary_of_summaries():
    msgs = numbered(agent_session(turns=12))
    fake = FakeSummarizer()
    out = tree(Window(msgs), ctx(summarizer=fake, config=cfg(chunk_size=4, levels=2)))
    nodes = parse_tree(out.window.summary, 2, out.window.messages[0].seq)
    leaves = [n for n in nodes if n.level == 1]
    assert 0 < len(leaves) <= FAN_IN and any(n.level == 2 for n in nodes)
    assert len([n for n in nodes if n.level == 2]) <= FAN_IN
    # Levels never increase towards the newest, and the nodes cover the seqs in order.
    assert [n.level for n in nodes] == sorted((n.level for n in nodes), reverse=True)
    assert all(a.last < b.first for a, b in zip(nodes, nodes[1:], strict=False))
    # A roll-up reads FAN_IN summaries, not the messages under them.
    merges = [r for r in fake.requests if all("[Summary L" in m.text for m in r.source)]
    assert merges and all(len(r.source) == FAN_IN for r in merges)


def test_tree_context_stays_well_formed():
    msgs = agent_session(turns=5, calls_per_turn=4)
    out = run_chain(Window(msgs), validate_chain(["tree"]), ctx(force=True, config=cfg()))
    kept = out.window.messages
    assert out.changed and pairs_ok(kept) and not unanswered_calls(kept)
    sent = [*out.window.preamble(), *kept]
    assert well_formed(sent) == sent  # nothing to repair
    assert out.result.after_tokens < out.result.before_tokens


def test_tree_failure_leaves_the_window_unchanged_cx_nt3():
    from contextsvc.engine.summarize import SummarizerError

    msgs = agent_session(turns=4)
    window = Window(list(msgs), "kept retain", "")
    with pytest.raises(SummarizerError):
        tree(window, ctx(summarizer=FailingSummarizer(), config=cfg()))
    assert window.messages == msgs and (window.retain, window.summary) == ("kept retain", "")


def test_a_summary_written_by_another_strategy_becomes_the_top_node():
    nodes = parse_tree("Earlier summary text.", 3, 40)
    assert [(n.level, n.first, n.last, n.text) for n in nodes] == [
        (3, 1, 39, "Earlier summary text.")
    ]
    assert parse_tree(render_tree(nodes), 3, 40) == nodes
    assert parse_tree("", 3, 1) == []


def test_chunks_never_separate_a_result_from_its_call():
    msgs = agent_session(turns=2, calls_per_turn=5)
    parts = chunks(msgs, 2)
    assert sum(len(p) for p in parts) == len(msgs)
    assert all(p[0].role != "tool" for p in parts) and all(pairs_ok(p) for p in parts)


@pytest.mark.parametrize(("name", "value"), [("chunk_size", 0), ("levels", 0), ("levels", -1)])
def test_tree_knobs_are_validated(name, value):
    with pytest.raises(EngineValidationError):
        CompactionConfig(**{name: value})
