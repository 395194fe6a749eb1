"""docs/concepts/guard.md#tool-budget, pure: admission before the trim, uncounted report tools."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from contextsvc.engine.deferral import assemble, choose_deferred
from contextsvc.engine.messages import ToolDef
from contextsvc.engine.output_trim import admit_outputs
from contextsvc.engine.tokens import estimate_tool_schemas, get_tokenizer


def test_spec001_tool_preflight_output_that_cannot_fit_is_refused_before_the_trim():
    # 500 left under the limit, 3,000 reclaimable by trimming older outputs.
    assert admit_outputs([10_000], room=500, reclaimable=3_000) == [False]
    assert admit_outputs([3_400], room=500, reclaimable=3_000) == [True]


def test_spec001_tool_preflight_one_refusal_does_not_refuse_a_smaller_output():
    assert admit_outputs([10_000, 200], room=500, reclaimable=0) == [False, True]


def test_spec001_tool_preflight_sticky_refuses_every_later_output():
    assert admit_outputs([10_000, 200], room=500, reclaimable=0, sticky=True) == [False, False]


def test_spec001_tool_preflight_admitted_outputs_use_up_the_room_in_order():
    assert admit_outputs([300, 300, 300], room=500, reclaimable=200) == [True, True, False]


@given(
    st.lists(st.integers(min_value=0, max_value=5_000), max_size=20),
    st.integers(min_value=-1_000, max_value=5_000),
    st.integers(min_value=0, max_value=5_000),
)
def test_spec001_tool_preflight_admitted_never_exceed_room_plus_reclaimable(outputs, room, free):
    admitted = admit_outputs(outputs, room=room, reclaimable=free)
    assert sum(t for t, ok in zip(outputs, admitted, strict=True) if ok) <= max(room, 0) + free
    # Non-sticky: every refused output is bigger than what was left for it.
    left = room + free
    for tokens, ok in zip(outputs, admitted, strict=True):
        assert ok == (tokens <= left)
        if ok:
            left -= tokens


def T(name: str) -> ToolDef:
    return ToolDef(name=name, description=f"{name} " * 50, category="builtin")


def test_spec001_schema_tokens_leave_out_the_final_report_and_task_status_tools():
    tok = get_tokenizer("tiktoken:cl100k_base")
    tools = [T("bash"), T("final_report"), T("task_status")]
    alone = estimate_tool_schemas([T("bash")], tok)
    assert estimate_tool_schemas(tools, tok, uncounted={"final_report", "task_status"}) == alone
    assert estimate_tool_schemas(tools, tok) > alone


def test_spec001_deferral_counts_no_tokens_for_uncounted_tools():
    tools = [T("bash"), T("final_report")]
    tokens = {"bash": 100, "final_report": 100}
    sel = assemble(tools, tokens, [], scale=1.0, uncounted={"final_report"})
    assert sel.tokens_all == sel.tokens_sent == 100
    assert [t.name for t in sel.active] == ["bash", "final_report"]  # still sent
    mcp = [ToolDef(name="m", category="mcp"), T("final_report")]
    assert (
        choose_deferred(
            mcp,
            {"m": 100, "final_report": 500},
            {},
            limit_tokens=150,
            scale=1.0,
            uncounted={"final_report"},
        )
        == []
    )
