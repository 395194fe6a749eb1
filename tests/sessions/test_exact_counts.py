"""A text past the append's exact-count budget is stored with a bounded estimate,
the guard uses the estimate meanwhile, and the exact count replaces it off the
request path — on the message and on the session's counters, by the difference
alone, whatever happened to the message in between."""

from __future__ import annotations

import random
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.models import Sum
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from contextsvc.engine.tokens import estimate_message, get_tokenizer
from sessions.models import Message, Session
from sessions.selectors import message_stored_count
from sessions.services.exact_counts import (
    COUNT_TASK,
    estimated_counts_sweep,
    message_count_exact,
)
from sessions.tasks import count_estimated_tokens, count_exact_tokens
from tests.conftest import tool_turn

pytestmark = pytest.mark.django_db

CL100K = get_tokenizer("tiktoken:cl100k_base")
# Random hex: ~1.8 characters a token, far from chars/4, so the estimate and
# the exact count differ and the difference must land on the counters.
_RNG = random.Random(7)
DENSE = "".join(_RNG.choice("0123456789abcdef") for _ in range(40_000))
WINDOW = {"context_window": 200_000, "max_output_tokens": 4_096, "buffer_tokens": 2_048}


@pytest.fixture(autouse=True)
def _small_budget(settings):
    # The shipped budget is 256 Ki characters; 10,000 lets a 40 KB text stand
    # for a 30 MB one without the test tokenizing megabytes.
    settings.CONTEXTSVC_EXACT_TOKEN_CHARS = 10_000


def post(client, sid, messages):
    response = client.post(f"sessions/{sid}/messages", {"messages": messages})
    assert response.status_code == 200, response.content
    return response.json()


def exact_of(session_pk: int, seq: int) -> int:
    return estimate_message(message_stored_count(session_pk, seq).message, CL100K)


def recount(session: Session) -> int:
    """The live window's tokens from its rows (what the cached counter must equal)."""
    live = Message.objects.filter(
        session=session, seq__gte=session.window_start_seq, retracted_at__isnull=True
    )
    return live.aggregate(t=Sum("token_count"))["t"] or 0


@pytest.fixture
def estimated(alice, make_session, django_capture_on_commit_callbacks):
    """A session whose third message was estimated; the enqueue is captured, not sent."""
    sid = make_session(id="est", **WINDOW)["id"]
    post(alice, sid, [{"role": "user", "content": "Summarise the dump"}])
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        body = post(
            alice,
            sid,
            [{"role": "assistant", "content": "Reading it."}, {"role": "user", "content": DENSE}],
        )
    session = Session.objects.get(external_id=sid)
    return sid, session, body, callbacks


def test_a_text_past_the_budget_is_estimated_over_and_marked(estimated):
    sid, session, body, callbacks = estimated
    small, big = body["messages"]
    assert not small["token_count_estimated"]
    assert big["token_count_estimated"]
    assert big["token_count"] >= exact_of(session.pk, big["seq"])  # an over-estimate here
    assert Message.objects.get(session=session, seq=big["seq"]).token_count_estimated
    assert callbacks, "the exact count is enqueued on commit"


def test_guard_uses_the_estimate_until_the_exact_count_lands(alice, estimated):
    sid, session, body, _ = estimated
    big = body["messages"][1]
    budget = alice.get(f"sessions/{sid}/budget").json()
    assert budget["components"]["conversation"] == recount(session)
    assert budget["guard"]["projected"] >= budget["used"] >= big["token_count"]

    assert message_count_exact(session_id=session.pk, seq=big["seq"]) == "counted"
    exact = Message.objects.get(session=session, seq=big["seq"])
    assert not exact.token_count_estimated
    assert exact.token_count == exact_of(session.pk, big["seq"]) < big["token_count"]
    session.refresh_from_db()
    assert session.conversation_tokens == recount(session)
    after = alice.get(f"sessions/{sid}/budget").json()
    assert after["used"] == budget["used"] - (big["token_count"] - exact.token_count)
    assert session.used_tokens == after["used"]
    # The context built now counts what the counters say (the cached window saw them move).
    context = alice.get(f"sessions/{sid}/context?format=raw").json()
    assert context["budget"]["used"] == after["used"]


def test_task_runs_eagerly_and_twice_is_once(estimated):
    _, session, body, _ = estimated
    seq = body["messages"][1]["seq"]
    first = count_exact_tokens.apply(args=[session.pk, [seq]]).get()
    assert first == {str(seq): "counted"}
    session.refresh_from_db()
    tokens = session.conversation_tokens
    assert count_exact_tokens.apply(args=[session.pk, [seq]]).get() == {str(seq): "exact"}
    session.refresh_from_db()
    assert session.conversation_tokens == tokens == recount(session)
    assert COUNT_TASK == count_exact_tokens.name


def test_a_retracted_message_is_corrected_on_its_row_only(alice, estimated):
    sid, session, body, _ = estimated
    seq = body["messages"][1]["seq"]
    response = alice.post(f"sessions/{sid}/messages/retract", {"last": 1})
    assert response.status_code == 200, response.content
    session.refresh_from_db()
    before = session.conversation_tokens
    assert before == recount(session)
    assert message_count_exact(session_id=session.pk, seq=seq) == "counted"
    session.refresh_from_db()
    assert session.conversation_tokens == before == recount(session)
    assert not Message.objects.get(session=session, seq=seq).token_count_estimated


def test_a_message_compacted_out_of_the_window_leaves_the_counters(alice, estimated):
    sid, session, body, _ = estimated
    seq = body["messages"][1]["seq"]
    post(alice, sid, [{"role": "assistant", "content": "Done."}])
    # The window moves past the message (as a compaction's set_window does).
    Session.objects.filter(pk=session.pk).update(window_start_seq=seq + 1)
    session.refresh_from_db()
    Session.objects.filter(pk=session.pk).update(conversation_tokens=recount(session))
    session.refresh_from_db()
    before = session.conversation_tokens
    assert message_count_exact(session_id=session.pk, seq=seq) == "counted"
    session.refresh_from_db()
    assert session.conversation_tokens == before == recount(session)


def test_reported_usage_stays_calibrated(alice, estimated):
    # The provider counted the prefix holding the message: its total was right,
    # our estimate of that prefix was not; correcting the count must not move
    # the calibrated projection.
    sid, session, body, _ = estimated
    seq = body["messages"][1]["seq"]
    usage = alice.post(f"sessions/{sid}/usage", {"input_tokens": 30_000, "output_tokens": 10})
    assert usage.status_code == 200, usage.content
    calibrated = alice.get(f"sessions/{sid}/budget").json()
    assert message_count_exact(session_id=session.pk, seq=seq) == "counted"
    after = alice.get(f"sessions/{sid}/budget").json()
    assert after["estimated_tokens"] < calibrated["estimated_tokens"]
    assert after["calibrated_tokens"] == calibrated["calibrated_tokens"]


def test_a_gone_message_or_session_is_nothing_to_do(estimated, alice):
    sid, session, body, _ = estimated
    assert message_count_exact(session_id=session.pk, seq=999) == "gone"
    assert alice.request("DELETE", f"sessions/{sid}").status_code in (200, 204)
    assert message_count_exact(session_id=session.pk, seq=body["messages"][1]["seq"]) == "gone"


def _queries_for_count(alice, make_session, sid: str, prior: int) -> int:
    make_session(id=sid, **WINDOW)
    for start in range(0, prior, 100):
        post(alice, sid, [{"role": "user", "content": f"m{start + i}"} for i in range(100)])
    body = post(alice, sid, [{"role": "user", "content": DENSE}])
    session = Session.objects.get(external_id=sid)
    with CaptureQueriesContext(connection) as queries:
        assert message_count_exact(session_id=session.pk, seq=body["messages"][0]["seq"]) == (
            "counted"
        )
    session.refresh_from_db()
    assert session.conversation_tokens == recount(session)
    return len(queries)


def test_cost_does_not_grow_with_the_session(alice, make_session):
    # No other message is read or counted again: the same statements at 10 or
    # 500 prior messages (the session UPDATE and lock are psycopg's own, unlogged).
    assert _queries_for_count(alice, make_session, "short", 0) == _queries_for_count(
        alice, make_session, "long", 500
    )


def test_a_preview_prices_a_huge_result_as_its_append_counts_it(alice, make_session):
    # The price of a tool result (docs/concepts/guard.md#tool-budget), asked before it is posted:
    # bounded like the append (no tokenizing without limit on any request), and the same figure.
    sid = make_session(id="preview", **WINDOW, policy={"tool_output_cache": {"enabled": False}})[
        "id"
    ]
    post(alice, sid, [{"role": "user", "content": "go"}, tool_turn("c1", "")[0]])
    price = alice.post(f"sessions/{sid}/tools/preview", {"tool_call_id": "c1", "text": DENSE})
    assert price.status_code == 200, price.content
    result = post(alice, sid, [{"role": "tool", "tool_call_id": "c1", "content": DENSE}])
    appended = result["messages"][-1]
    assert appended["token_count_estimated"]
    assert appended["token_count"] == price.json()["tokens"]


def test_the_sweep_counts_an_estimate_whose_task_never_ran(alice, estimated):
    # The enqueue was lost (captured, never run: a broker outage at append).
    # The periodic sweep leaves it to its task while young, then counts it once.
    sid, session, body, _ = estimated
    seq = body["messages"][1]["seq"]
    assert estimated_counts_sweep(older_than_seconds=300) == 0
    assert Message.objects.get(session=session, seq=seq).token_count_estimated

    Message.objects.filter(session=session, seq=seq).update(
        created_at=timezone.now() - timedelta(minutes=10)
    )
    assert count_estimated_tokens.apply(kwargs={"older_than_seconds": 300}).get() == 1
    row = Message.objects.get(session=session, seq=seq)
    assert not row.token_count_estimated
    assert row.token_count == exact_of(session.pk, seq) < body["messages"][1]["token_count"]
    session.refresh_from_db()
    assert session.conversation_tokens == recount(session)
    assert estimated_counts_sweep(older_than_seconds=0) == 0  # nothing left to count


def test_the_sweep_command_reports_what_it_counted(estimated):
    _, session, body, _ = estimated
    out = StringIO()
    call_command("count_estimated_tokens", "--older-than-seconds", "0", stdout=out)
    assert out.getvalue().strip() == "Counted 1 estimated message(s) exactly"
    assert not Message.objects.filter(session=session, token_count_estimated=True).exists()
