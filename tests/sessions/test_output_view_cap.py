"""The insertion cap of tool-output views (``tool_output_cache.view_share``):
an output's view takes at most a share of the window, its head and tail, the rest by ref."""

from __future__ import annotations

import pytest

from contextsvc.engine.output_fit import approx_tokens, capped_view
from contextsvc.engine.output_sources import whole_view_config
from contextsvc.engine.output_views import (
    DEFAULT_VIEW_SHARE,
    MIN_VIEW_CAP_TOKENS,
    OutputInfo,
    ViewConfig,
    iter_text_lines,
    make_view,
    resolve_view_config,
)
from sessions.models import Message
from tests.conftest import tool_turn

WINDOW = {"context_window": 16_000, "max_output_tokens": 2_000, "buffer_tokens": 0}  # limit 14k


def log(lines: int) -> str:
    return "".join(f"line {i:05d} of the build log: step ok\n" for i in range(lines)) + "FAILED x"


def view_of(text: str, config: ViewConfig):
    info = OutputInfo(ref="out_abc", byte_size=len(text), line_count=text.count("\n") + 1)
    view = make_view(iter_text_lines(text, config.max_line_length + 1), info, config)
    return capped_view(view, text, info, config)


def test_a_long_output_keeps_its_head_and_tail_within_the_cap():
    text = log(2_000)  # ~20k tokens
    view = view_of(text, ViewConfig(view_tokens=300))
    assert view.state == "cut" and approx_tokens(view.text) <= 300
    assert view.text.startswith("line 00000 ") and view.text.endswith("FAILED x")
    assert "ref=out_abc" in view.text and "tool_output_cache" in view.text


def test_a_huge_output_is_cut_from_its_ends_with_the_stored_line_numbers():
    text = "".join(f"row {i:07d}\n" for i in range(100_000)) + "END"  # 1.2 MB, 100,001 lines
    view = view_of(text, ViewConfig(view_tokens=300))
    lines = view.text.split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("[… lines "))
    first_tail = 100_001 - (len(lines) - at - 1) + 1  # the stored output's numbering
    assert lines[at].startswith(f"[… lines {at + 1}-{first_tail - 1:,} of 100,001 cut")
    assert lines[at + 1] == f"row {first_tail - 1:07d}" and lines[-1] == "END"
    assert f'"offset": {at + 1}' in lines[at]


def test_an_output_under_the_cap_or_without_one_is_unchanged():
    short = log(10)
    assert view_of(short, ViewConfig(view_tokens=300)).state == "full"
    # the head cut (docs/concepts/trimming.md#cut-view)
    assert view_of(log(2_000), ViewConfig()).text.startswith("line 00000")
    assert view_of(log(2_000), ViewConfig()).text.endswith("FAILED x") is False
    # A page of the expansion tools posted back is never cut again.
    assert whole_view_config(ViewConfig(view_tokens=300), short).view_tokens is None


def test_the_cap_is_a_share_of_the_effective_window_with_a_floor():
    assert resolve_view_config({}, limit=14_000).view_tokens == int(DEFAULT_VIEW_SHARE * 14_000)
    assert resolve_view_config({"view_share": 0.1}, limit=14_000).view_tokens == 1_400
    assert resolve_view_config({"view_share": 0.001}, limit=14_000).view_tokens == (
        MIN_VIEW_CAP_TOKENS
    )
    assert resolve_view_config({}).view_tokens is None  # no window: no cap


@pytest.mark.django_db
def test_a_posted_output_is_capped_and_stays_readable_by_ref(alice, make_session):
    sid = make_session(**WINDOW)["id"]
    text = log(2_000)
    body = alice.post(f"sessions/{sid}/messages", {"messages": tool_turn("c1", text)}).json()
    result = body["messages"][-1]
    assert result["view"] == "cut"
    cap = int(DEFAULT_VIEW_SHARE * 14_000)
    # The cap is cut at about four characters a token; the session's tokenizer
    # counts this log at ~3: the view is near the cap, far from the output's ~20k.
    assert result["token_count"] <= 1.5 * cap
    row = Message.objects.get(session__external_id=sid, seq=result["seq"])
    assert row.view.endswith("FAILED x")
    page = alice.get(f"refs/{result['output_ref']}", offset=1000, limit=1).json()
    assert "line 00999 of the build log" in page["text"]


@pytest.mark.django_db
def test_view_share_one_turns_the_cap_off_and_bounds_are_checked(alice, make_session):
    sid = make_session(**WINDOW, policy={"tool_output_cache": {"view_share": 1}})["id"]
    # ~2k tokens: over 0.02 of the window, under the 50 KiB cap (docs/concepts/trimming.md#cut-view)
    text = log(200)
    body = alice.post(f"sessions/{sid}/messages", {"messages": tool_turn("c1", text)}).json()
    assert body["messages"][-1]["view"] == "full"
    for bad in (0, 1.5):
        response = alice.patch(
            f"sessions/{sid}", {"policy": {"tool_output_cache": {"view_share": bad}}}
        )
        assert response.status_code == 422
        assert "view_share" in response.json()["error"]["message"]
