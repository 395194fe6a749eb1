"""Tool output storage (sessions/outputs/): chunks, slices, grep, uploads, GC."""

from __future__ import annotations

import io
import random
import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from contextsvc.errors import PayloadTooLarge, ValidationFailed
from sessions.extensions import REGISTRY
from sessions.models import AgentKey, Message, Session, ToolOutput, ToolOutputChunk
from sessions.outputs import grep as grep_module
from sessions.outputs.gc import outputs_gc
from sessions.outputs.grep import GREP_LINE_CHARS, output_grep
from sessions.outputs.read import CUT_MARK, output_read_all, output_slice
from sessions.outputs.store import READ_PIECE, output_store_bytes, output_upload
from sessions.services.append import session_append_messages
from sessions.services.keys import agent_key_create
from sessions.services.sessions import session_create
from sessions.tasks import gc_outputs
from tests.conftest import tool_turn

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner() -> AgentKey:
    return agent_key_create(name="store-owner")[0]


@pytest.fixture
def session(owner) -> Session:
    return session_create(
        owner=owner,
        data={"model": "claude-sonnet-4-5", "context_window": 32_000, "max_output_tokens": 4_096},
    )


def store(session: Session, data: bytes, chunk_bytes: int = 64) -> ToolOutput:
    output, _ = output_store_bytes(
        session=session, data=data, tool_name="bash", chunk_bytes=chunk_bytes
    )
    return output


def reference_lines(data: bytes) -> list[str]:
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def sample_bytes(seed: int = 7, lines: int = 300) -> bytes:
    """Mixed lines: empty, CRLF, multibyte, invalid UTF-8, some longer than a chunk."""
    rng = random.Random(seed)
    out = []
    for i in range(lines):
        kind = rng.random()
        if kind < 0.1:
            out.append(b"")
        elif kind < 0.15:
            out.append(f"long {i} ".encode() + b"L" * rng.randint(100, 400))
        elif kind < 0.2:
            out.append(f"bin {i} ".encode() + b"\xff\xfe\x80")
        elif kind < 0.3:
            out.append(f"crlf {i}\r".encode())
        else:
            out.append(f"line {i} ".encode() + "é日".encode() * rng.randint(0, 20))
    return b"\n".join(out) + (b"\n" if seed % 2 else b"")


# --- chunks and the line index ------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_every_slice_matches_the_text_across_chunk_boundaries(session, seed):
    data = sample_bytes(seed)
    output = store(session, data)
    lines = reference_lines(data)
    assert output.line_count == len(lines)
    assert output.byte_size == len(data)
    assert output.chunk_count == ToolOutputChunk.objects.filter(output=output).count() > 10
    assert output_read_all(output) == data  # byte-exact
    for offset in range(1, len(lines) + 2, 7):
        for limit in (1, 5, 40):
            got = output_slice(output, offset=offset, limit=limit)
            want = lines[offset - 1 : offset - 1 + limit]
            assert got["text"] == "\n".join(f"{offset + i:>6}\t{w}" for i, w in enumerate(want))
            assert got["lines"] == len(want)
            assert got["has_more"] == (offset - 1 + len(want) < len(lines))


def test_chunks_end_after_newlines_and_index_their_first_line(session):
    data = b"".join(b"%05d\n" % i for i in range(1000))
    output = store(session, data, chunk_bytes=256)
    chunks = list(ToolOutputChunk.objects.filter(output=output).order_by("index"))
    line = 1
    for chunk in chunks:
        blob = bytes(chunk.data)
        assert blob.endswith(b"\n")
        assert chunk.first_line == line
        assert blob.startswith(b"%05d" % (line - 1))
        line += chunk.line_count
    assert line - 1 == 1000


def test_a_line_longer_than_a_chunk_is_cut_and_the_next_line_found_by_index(session):
    data = b"first\n" + b"X" * 5000 + b"\nafter long\nlast"
    output = store(session, data)
    assert output.line_count == 4
    got = output_slice(output, offset=1, limit=10, max_line_length=50)
    assert got["text"].split("\n") == [
        "     1\tfirst",
        "     2\t" + "X" * 50 + CUT_MARK,
        "     3\tafter long",
        "     4\tlast",
    ]
    assert got["cut_lines"] == [2]
    # Without a per-line cut the line comes whole.
    whole = output_slice(output, offset=2, limit=1)
    assert whole["text"] == "     2\t" + "X" * 5000


def test_offset_past_the_end_is_an_empty_slice_not_an_error(session):
    output = store(session, b"a\nb\n")
    got = output_slice(output, offset=50, limit=10)
    assert (got["text"], got["lines"], got["total_lines"], got["has_more"]) == ("", 0, 2, False)


def test_offset_zero_reads_from_the_first_line(session):
    output = store(session, b"a\nb\n")
    assert output_slice(output, offset=0, limit=1)["text"] == "     1\ta"


@pytest.mark.parametrize(("offset", "limit"), [(1, -3), (-1, 5)])
def test_bad_slice_arguments_are_validation_errors(session, offset, limit):
    output = store(session, b"a\n")
    with pytest.raises(ValidationFailed):
        output_slice(output, offset=offset, limit=limit)


def test_slice_text_is_capped_and_says_where_to_go_on(session):
    output = store(session, b"".join(b"%04d " % i + b"y" * 95 + b"\n" for i in range(1000)))
    got = output_slice(output, offset=1, limit=1000, max_bytes=2048)
    assert got["truncated"] and got["has_more"]
    assert 0 < got["lines"] < 1000
    assert got["next_offset"] == got["lines"] + 1
    assert len(got["text"].encode()) <= 2048


def test_non_utf8_bytes_are_kept_exactly_and_shown_with_replacement_characters(session):
    data = b"caf\xe9 ok\n\xff\xfe\xfd\n"
    output = store(session, data)
    assert output_read_all(output) == data
    text = output_slice(output, offset=1, limit=5)["text"]
    assert "caf\ufffd ok" in text and "\ufffd" in text.split("\n")[1]


def test_empty_output_has_no_lines(session):
    output = store(session, b"")
    assert (output.byte_size, output.line_count, output.chunk_count) == (0, 0, 0)
    assert output_slice(output, offset=1, limit=5)["text"] == ""


# --- dedupe -------------------------------------------------------------------------------


def test_identical_output_in_one_session_is_stored_once(session, owner):
    first, dedup1 = output_store_bytes(session=session, data=b"same\n")
    second, dedup2 = output_store_bytes(session=session, data=b"same\n")
    assert first.ref == second.ref and (dedup1, dedup2) == (False, True)
    assert ToolOutput.objects.filter(session=session).count() == 1
    other = session_create(owner=owner, data={"model": "gpt-4o", "id": "other"})
    third, dedup3 = output_store_bytes(session=other, data=b"same\n")
    assert third.ref != first.ref and not dedup3


# --- streaming upload -----------------------------------------------------------------------


def test_upload_streams_into_chunks_and_matches_the_bytes(session):
    data = sample_bytes(5, lines=3000)
    reads: list[int] = []
    stream = io.BytesIO(data)

    def read(n: int) -> bytes:
        reads.append(n)
        return stream.read(n)

    output, dedup = output_upload(session=session, read=read, tool_name="dump", chunk_bytes=1024)
    assert not dedup and output.source == "upload" and output.tool_name == "dump"
    assert output_read_all(output) == data
    assert output.line_count == len(reference_lines(data))
    assert all(n <= READ_PIECE for n in reads)


def test_upload_over_the_limit_leaves_nothing(session):
    stream = io.BytesIO(b"z" * 10_000)
    with pytest.raises(PayloadTooLarge):
        output_upload(session=session, read=stream.read, max_bytes=5_000, chunk_bytes=512)
    assert not ToolOutput.objects.exists() and not ToolOutputChunk.objects.exists()


def test_upload_announced_over_the_limit_is_refused_before_reading(session):
    def read(n: int) -> bytes:  # pragma: no cover - must not be called
        raise AssertionError("read")

    with pytest.raises(PayloadTooLarge):
        output_upload(session=session, read=read, max_bytes=100, content_length=101)


def test_a_failed_upload_leaves_no_half_written_output(session):
    pieces = iter([b"a" * 3000, b"b" * 3000])

    def read(n: int) -> bytes:
        try:
            return next(pieces)
        except StopIteration:
            raise OSError("client went away") from None

    with pytest.raises(OSError):
        output_upload(session=session, read=read, chunk_bytes=512)
    assert not ToolOutput.objects.exists() and not ToolOutputChunk.objects.exists()


def test_uploading_the_same_bytes_again_returns_the_existing_ref(session):
    first, _ = output_upload(session=session, read=io.BytesIO(b"x\ny\n").read)
    again, dedup = output_upload(session=session, read=io.BytesIO(b"x\ny\n").read)
    assert dedup and again.ref == first.ref
    assert ToolOutput.objects.count() == 1 and ToolOutputChunk.objects.count() == 1


# --- grep ---------------------------------------------------------------------------------


@pytest.fixture
def small_buffers(monkeypatch):
    """Grep buffers of ~128 bytes and long-line pieces of 300, to cross every boundary."""
    monkeypatch.setattr(grep_module, "CHUNK_BYTES", 64)
    monkeypatch.setattr(grep_module, "GREP_BUFFER_CHUNKS", 2)
    monkeypatch.setattr(grep_module, "GREP_MAX_LINE_BYTES", 300)


def naive_grep(lines: list[str], pattern: str, context: int, flags: int = 0) -> str:
    rx = re.compile(pattern, flags | re.MULTILINE)
    out: list[str] = []
    printed = 0
    for i, line in enumerate(lines, 1):
        if not rx.search(line):
            continue
        group = [
            (n, "-" if n != i else ":", lines[n - 1])
            for n in range(max(1, i - context), min(len(lines), i + context) + 1)
        ]
        fresh = [g for g in group if g[0] > printed]
        if out and fresh and fresh[0][0] > printed + 1:
            out.append("--")
        out.extend(f"{n}{sep}{t[:-1] if t.endswith(chr(13)) else t}" for n, sep, t in fresh)
        if fresh:
            printed = fresh[-1][0]
    return "\n".join(out)


@pytest.mark.parametrize("context", [0, 1, 3])
@pytest.mark.parametrize("pattern", [r"line 1\d ", r"^crlf", r"é日é", r"bin \d+", r"\d$", r"^$"])
def test_grep_agrees_with_a_line_by_line_reference(session, small_buffers, pattern, context):
    data = sample_bytes(3, lines=200).replace(b"L" * 50, b"L" * 20)  # no line over the piece size
    output = store(session, data)
    lines = reference_lines(data)
    got = output_grep(output, pattern=pattern, context=context, max_matches=1000)
    assert got["text"] == naive_grep(lines, pattern, context)
    for m in got["matches"]:
        assert re.search(pattern, lines[m["line"] - 1], re.MULTILINE)
        assert [b["line"] for b in m["before"]] == list(
            range(max(1, m["line"] - context), m["line"])
        )
        assert [a["line"] for a in m["after"]] == list(
            range(m["line"] + 1, min(len(lines), m["line"] + context) + 1)
        )
    assert got["total_lines"] == len(lines)


def test_grep_pattern_across_a_newline_does_not_match(session):
    output = store(session, b"abc\ndef\n")
    assert output_grep(output, pattern=r"c\nd")["matches"] == []
    assert [m["line"] for m in output_grep(output, pattern=r"c\s*")["matches"]] == [1]


def test_grep_ignore_case_and_max_matches(session):
    output = store(session, b"".join(b"Error %d\n" % i for i in range(50)))
    assert output_grep(output, pattern="error")["match_count"] == 0
    got = output_grep(output, pattern="error", ignore_case=True, max_matches=10)
    assert got["match_count"] == 10 and got["truncated"]
    assert [m["line"] for m in got["matches"]] == list(range(1, 11))


def test_grep_on_one_huge_line_is_bounded_and_reports_it_once(session, small_buffers):
    data = b"head\n" + (b"abc" * 1000 + b"NEEDLE" + b"abc" * 1000) * 3 + b"\ntail\n"
    output = store(session, data)
    got = output_grep(output, pattern="NEEDLE|tail")
    assert [m["line"] for m in got["matches"]] == [2, 3]
    assert len(got["matches"][0]["text"]) <= GREP_LINE_CHARS + len(CUT_MARK)


def test_invalid_regex_is_a_validation_error_with_the_reason(session):
    output = store(session, b"a\n")
    with pytest.raises(ValidationFailed) as info:
        output_grep(output, pattern="(unclosed")
    assert "missing )" in info.value.message
    assert info.value.details["field"] == "pattern"


def test_catastrophic_pattern_is_stopped_by_the_time_limit(session):
    output = store(session, b"x" * 30_000 + b"\n", chunk_bytes=256 * 1024)
    with pytest.raises(ValidationFailed) as info:
        output_grep(output, pattern=r"(x+x+)+y", time_limit=0.3)
    assert info.value.details["reason"] == "timeout"


# --- GC -------------------------------------------------------------------------------------


def age(output: ToolOutput, days: int) -> None:
    """The output, and its session, unused for ``days`` (a session in use keeps
    every output: history_search may need any of them)."""
    then = timezone.now() - timedelta(days=days)
    ToolOutput.objects.filter(pk=output.pk).update(created_at=then, last_used_at=then)
    Session.objects.filter(pk=output.session_id).update(updated_at=then)


def post_tool(session: Session, call_id: str, text: str) -> str:
    response = session_append_messages(session=session, messages=tool_turn(call_id, text))
    return response["messages"][-1]["output_ref"]


def test_gc_deletes_old_unreferenced_outputs_and_keeps_referenced_ones(session):
    referenced = post_tool(session, "c1", "live output\n")
    orphan = store(session, b"uploaded, never referenced\n")
    recent_orphan = store(session, b"uploaded just now\n")
    for ref in (referenced, orphan.ref):
        age(ToolOutput.objects.get(ref=ref), 30)
    dry = outputs_gc(older_than_days=7, dry_run=True)
    assert [o["ref"] for o in dry["outputs"]] == [orphan.ref]
    assert ToolOutput.objects.filter(ref=orphan.ref).exists()  # dry run deletes nothing
    result = outputs_gc(older_than_days=7)
    assert [o["ref"] for o in result["outputs"]] == [orphan.ref] and result["kept_referenced"] == 1
    assert set(ToolOutput.objects.values_list("ref", flat=True)) == {referenced, recent_orphan.ref}
    assert not ToolOutputChunk.objects.filter(output_id=orphan.pk).exists()
    assert outputs_gc(older_than_days=7)["count"] == 0  # idempotent


def test_gc_collects_outputs_referenced_only_before_the_live_window(session):
    ref = post_tool(session, "c1", "old output\n")
    session.refresh_from_db()
    # A compaction moved the live window past the message (it stays for audit).
    Session.objects.filter(pk=session.pk).update(window_start_seq=session.last_seq + 1)
    age(ToolOutput.objects.get(ref=ref), 30)
    assert outputs_gc(older_than_days=7)["count"] == 1
    assert Message.objects.filter(output_ref=ref).exists()


def test_gc_keeps_every_output_of_a_session_in_use(session):
    ref = post_tool(session, "c1", "compacted away, still searchable\n")
    session.refresh_from_db()
    Session.objects.filter(pk=session.pk).update(window_start_seq=session.last_seq + 1)
    then = timezone.now() - timedelta(days=30)
    ToolOutput.objects.filter(ref=ref).update(created_at=then, last_used_at=then)
    assert outputs_gc(older_than_days=7)["count"] == 0  # the session was used today
    Session.objects.filter(pk=session.pk).update(updated_at=then)
    assert outputs_gc(older_than_days=7)["count"] == 1


def test_gc_keeps_refs_named_in_the_retained_summary(session):
    ref = post_tool(session, "c1", "kept by retain\n")
    session.refresh_from_db()
    Session.objects.filter(pk=session.pk).update(
        window_start_seq=session.last_seq + 1, retain=f"- build log: ref={ref}"
    )
    age(ToolOutput.objects.get(ref=ref), 30)
    assert outputs_gc(older_than_days=7)["count"] == 0


def test_gc_honours_reference_checks_registered_by_other_apps(session, monkeypatch):
    output = store(session, b"in a snapshot\n")
    age(output, 30)
    monkeypatch.setattr(
        REGISTRY,
        "reference_checks",
        [*REGISTRY.reference_checks, lambda outputs: {o.ref for o in outputs}],
    )
    assert outputs_gc(older_than_days=7)["count"] == 0
    assert ToolOutput.objects.filter(pk=output.pk).exists()


def test_reusing_an_output_protects_it_from_gc(session):
    output = store(session, b"shared\n")
    age(output, 30)
    output_store_bytes(session=session, data=b"shared\n")  # dedupe hit touches it
    assert outputs_gc(older_than_days=7)["count"] == 0


def test_gc_command_dry_run_lists_and_deletes_nothing(session):
    output = store(session, b"orphan\n")
    age(output, 30)
    out = io.StringIO()
    call_command("gc_outputs", "--dry-run", "--older-than-days", "7", stdout=out)
    assert f"Would delete {output.ref}" in out.getvalue()
    assert ToolOutput.objects.filter(pk=output.pk).exists()
    call_command("gc_outputs", "--older-than-days", "7", stdout=io.StringIO())
    assert not ToolOutput.objects.filter(pk=output.pk).exists()


def test_gc_task_runs_the_service_and_is_safe_twice(session, settings):
    settings.CONTEXTSVC_OUTPUT_RETENTION_DAYS = 7
    age(store(session, b"orphan\n"), 30)
    assert gc_outputs.run()["count"] == 1
    assert gc_outputs.run()["count"] == 0
