"""Key-fact extraction and the retention check a compaction reports: deterministic, no model."""

from __future__ import annotations

from contextsvc.engine.messages import Message, ToolCall
from contextsvc.engine.reachability import check_retention
from contextsvc.engine.retention import (
    MAX_PER_MESSAGE,
    KeyFact,
    WindowText,
    extract_key_facts,
    find_paths,
)

CONVERSATION = [
    Message(role="user", seq=1, content=(
        "Please add retries to src/client/http.py.\n"
        "You must not change the public API. Never touch vendor/.\n"
        "See https://example.com/docs/retry.html for the policy."
    )),
    Message(role="assistant", seq=2, content="I'll look at it. TODO: check the timeout too.",
            tool_calls=(ToolCall("c1", "read", {"path": "src/client/http.py"}),)),
    Message(role="tool", seq=3, tool_call_id="c1", name="read", output_ref="out_1234",
            content="listing /usr/lib/python3/site.py\nTraceback (most recent call last):\n"
                    "  File \"x\"\nConnectionError: reset by peer\n"),
    Message(role="assistant", seq=4, content="The fix is a backoff; output kept as ref=out_5678."),
]  # fmt: skip


def facts_by_kind(facts: list[KeyFact]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in facts:
        out.setdefault(f.kind, []).append(f.text)
    return out


def test_extracts_each_kind_deterministically():
    facts = extract_key_facts(CONVERSATION)
    assert facts == extract_key_facts(CONVERSATION)
    kinds = facts_by_kind(facts)
    assert kinds["request"] == ["Please add retries to src/client/http.py."]
    assert "You must not change the public API." in kinds["constraint"]
    assert "Never touch vendor/." in kinds["constraint"]
    assert kinds["path"] == ["src/client/http.py"]  # URLs and tool-output listings are not paths
    assert kinds["todo"] == ["I'll look at it. TODO: check the timeout too."]
    assert kinds["error"] == [
        "Traceback (most recent call last):",
        "ConnectionError: reset by peer",
    ]
    assert kinds["ref"] == ["out_1234", "out_5678"]
    assert [f.seq for f in facts] == sorted(f.seq for f in facts)
    error = next(f for f in facts if f.kind == "error")
    assert error.from_ref == "out_1234"  # recoverable through its ref


def test_find_paths_rejects_non_paths():
    text = "and/or 1/2 w/o https://x.io/a/b.py ./run.sh /etc/hosts a/b/c pkg/mod.py README.md"
    assert find_paths(text) == ["./run.sh", "/etc/hosts", "a/b/c", "pkg/mod.py", "README.md"]


def test_preamble_is_not_a_user_request():
    pre = Message(role="user", content="[Summary of the earlier conversation]\nWe fixed src/a.py")
    kinds = facts_by_kind(extract_key_facts([pre]))
    assert "request" not in kinds and kinds["path"] == ["src/a.py"]


def test_per_message_cap_and_deduplication():
    text = "\n".join(f"ValueError: case {i}" for i in range(50))
    msgs = [Message(role="tool", seq=1, content=text, tool_call_id="a"),
            Message(role="tool", seq=2, content=text, tool_call_id="b")]  # fmt: skip
    errors = [f for f in extract_key_facts(msgs) if f.kind == "error"]
    # At most MAX_PER_MESSAGE new facts per message; repeats are not counted twice.
    assert [f.seq for f in errors] == [1] * MAX_PER_MESSAGE + [2] * MAX_PER_MESSAGE
    assert len({f.text for f in errors}) == len(errors)
    assert len(extract_key_facts(msgs, max_facts=3)) == 3


def test_retention_exact_paraphrase_identifiers_and_recoverable():
    facts = extract_key_facts(CONVERSATION)
    window = WindowText.of(
        retain="- File: src/client/http.py\n- Output ref: out_5678",
        summary="The user asked to add retries to src/client/http.py; the public API must stay.",
        messages=[],
    )
    report = check_retention(facts, window)
    lost = {(f.kind, f.text) for f in report.lost}
    assert ("path", "src/client/http.py") not in lost
    assert ("request", "Please add retries to src/client/http.py.") not in lost  # paraphrased
    assert ("constraint", "Never touch vendor/.") in lost
    assert ("ref", "out_1234") in lost  # its ref is gone from the window: nothing to expand
    assert report.total == report.kept + report.recoverable + len(report.lost)
    assert 0 < report.score < 1
    d = report.to_dict()
    assert d["lost_count"] == len(report.lost) and d["lost_by_kind"]["constraint"] == 1


def test_facts_of_a_cleared_output_are_recoverable_by_ref():
    facts = extract_key_facts(CONVERSATION[2:3])
    window = WindowText.of(
        "",
        "",
        [
            Message(
                role="tool",
                tool_call_id="c1",
                output_ref="out_1234",
                view="[tool output cleared; ref=out_1234]",
            )
        ],
    )
    report = check_retention(facts, window)
    assert report.recoverable == 2 and report.kept == 1 and report.score == 1.0  # errors + the ref


def test_identifiers_must_survive_for_near_identical_requests():
    facts = [KeyFact("request", "Turn 0: fix src/app/mod0.py and keep the tests green")]
    window = WindowText.of("", "Turn 4: fix src/app/mod4.py and keep the tests green", [])
    assert check_retention(facts, window).lost == facts


def test_nothing_to_keep_scores_one():
    assert check_retention([], WindowText.of("", "", [])).score == 1.0


def test_a_retain_block_carries_its_facts_forward_unchanged():
    """Compacting twice must not stack labels ("Constraint: Constraint: ...")."""
    from contextsvc.engine.build import RETAIN_HEADER
    from contextsvc.engine.offline_summarizer import OfflineSummarizer

    block = "\n".join(
        [
            RETAIN_HEADER,
            "- Constraint: never push to main",
            "- User request: fix the parser",
            "- File: src/parser.py",
        ]
    )
    facts = extract_key_facts([Message(role="user", content=block)])
    assert {(f.kind, f.text) for f in facts} == {
        ("constraint", "never push to main"),
        ("request", "fix the parser"),
        ("path", "src/parser.py"),
    }
    retain = OfflineSummarizer()._retain(facts, 2_000)
    assert "Constraint: never push to main" in retain
    assert "Constraint: Constraint" not in retain
