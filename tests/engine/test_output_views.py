"""In-context views and the budget trim (docs/concepts/trimming.md#views,
docs/concepts/trimming.md#budget-trim, docs/concepts/trimming.md#presets)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextsvc.engine.build import ContextParts, build_request
from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.messages import Message, ToolCall, ToolDef
from contextsvc.engine.output_trim import (
    MIN_TRIM_SAVING,
    TrimCandidate,
    plan_trim,
    tool_output_budget,
    trim_target,
    trimmed_view,
)
from contextsvc.engine.output_views import (
    OutputInfo,
    ViewConfig,
    count_lines,
    failed_view,
    iter_text_lines,
    make_view,
    notice_reserve,
    resolve_view_config,
    utf8_prefix,
    view_bytes_estimate,
)

REF = "out_0123456789abcdef01234567"


def info_for(text: str, tool: str = "bash") -> OutputInfo:
    return OutputInfo(
        ref=REF, byte_size=len(text.encode()), line_count=count_lines(text), tool_name=tool
    )


def view_of(text: str, config: ViewConfig):
    return make_view(iter_text_lines(text, config.max_line_length + 1), info_for(text), config)


# --- lines ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        ("", []),
        ("a", ["a"]),
        ("a\n", ["a"]),
        ("a\nb", ["a", "b"]),
        ("\n\n", ["", ""]),
        ("a\r\nb\n", ["a\r", "b"]),
    ],
)
def test_lines_are_numbered_like_a_reader(text, lines):
    assert list(iter_text_lines(text)) == lines
    assert count_lines(text) == len(lines)


def test_iter_text_lines_yields_only_the_head_of_long_lines():
    assert list(iter_text_lines("x" * 10 + "\nshort", max_chars=4)) == ["xxxx", "shor"]
    assert list(iter_text_lines("x" * 10 + "\nabc", max_chars=4)) == ["xxxx", "abc"]


def test_utf8_prefix_never_splits_a_character():
    assert utf8_prefix("ééé", 3) == "é"
    assert utf8_prefix("ééé", 4) == "éé"
    assert utf8_prefix("abc", 0) == ""


# --- the cut view (docs/concepts/trimming.md#cut-view) --------------------------------------------


def test_small_output_is_its_own_view():
    view = view_of("file_a\nfile_b\nfile_c\n", ViewConfig())
    assert view.is_full and view.state == "full" and view.text is None


def test_long_line_is_cut_at_max_line_length_spec000():
    text = "short\n" + "y" * 2500 + "\nend"
    view = view_of(text, ViewConfig())
    assert view.state == "cut"
    body = view.text.split("\n")
    assert body[0] == "short"
    assert body[1] == "y" * 2000  # docs/concepts/trimming.md#cut-view: lines cut at 2000 characters
    assert body[2] == "end"
    assert "1 line longer than 2,000 characters cut" in view.text
    # Every line was shown, so the notice points at the cut line.
    assert f'{{"ref_id": "{REF}", "offset": 2, "limit": 200}}' in view.text


def test_total_is_cut_at_max_message_bytes_with_an_expansion_notice_spec000():
    text = "".join(f"line {i:05d} " + "z" * 80 + "\n" for i in range(2000))  # ~180 KB
    view = view_of(text, ViewConfig())
    assert view.state == "cut"
    # docs/concepts/trimming.md#cut-view: 50 KiB per output
    assert len(view.text.encode()) <= 50 * 1024
    shown = view.lines_shown
    assert 0 < shown < 2000
    assert view.text.startswith("line 00000 ")
    # The notice: what was shown, the sizes, the tool, and the exact call to read on.
    assert f"showing lines 1-{shown:,} of 2,000" in view.text
    assert f"({len(text.encode()):,} bytes)" in view.text
    assert 'from "bash"' in view.text
    assert (
        f'tool_output_cache {{"ref_id": "{REF}", "offset": {shown + 1}, "limit": 200}}' in view.text
    )
    assert f'tool_output_cache_grep {{"ref_id": "{REF}"' in view.text


def test_a_single_line_bigger_than_the_budget_shows_its_head():
    text = "q" * 10_000
    view = view_of(text, ViewConfig(max_message_bytes=2000, max_line_length=5000))
    assert view.state == "cut"
    assert view.text.startswith("q" * 100)
    assert len(view.text.encode()) <= 2000
    assert '"offset": 1' in view.text


def test_view_never_splits_multibyte_characters():
    text = "é" * 40_000
    view = view_of(text, ViewConfig(max_line_length=100_000))
    assert len(view.text.encode()) <= 50 * 1024
    view.text.encode("utf-8")  # valid UTF-8 all the way


def test_replacement_characters_pass_through():
    text = b"ok \xff\xfe bytes\n".decode("utf-8", errors="replace")
    assert view_of(text, ViewConfig()).is_full


# --- presets (docs/concepts/trimming.md#presets) --------------------------------------------------


def test_offload_preset_replaces_output_with_spec002_text():
    text = "go: downloading github.com/stretchr/testify v1.9.0\n" * 200
    config = resolve_view_config({"preset": "offload"})
    view = view_of(text, config)
    assert view.state == "offloaded"
    assert view.text.startswith(
        f'[Tool result stored — {len(text.encode()):,} bytes, 200 lines from "bash".'
    )
    assert "First 200 chars: go: downloading github.com/stretchr/testify v1.9.0\ngo:" in view.text
    assert f'ref_id="{REF}"' in view.text
    assert len(view.text) < 800


def test_offload_preset_keeps_outputs_under_4096_bytes():
    config = resolve_view_config({"preset": "offload"})
    # docs/concepts/trimming.md#offload-view: only the byte threshold decides (a 4096-char line
    # still fits).
    assert view_of("x" * 4096, config).is_full
    assert view_of("x" * 4097, config).state == "offloaded"


def test_tool_response_preset_cuts_at_12288_bytes_spec001():
    config = resolve_view_config({"preset": "tool_response"})
    assert config.max_message_bytes == 12_288 and config.style == "cut"
    view = view_of("w" * 100 + "\n" * 1 + ("v" * 99 + "\n") * 500, config)
    assert view.state == "cut" and len(view.text.encode()) <= 12_288


def test_explicit_policy_fields_override_the_preset():
    config = resolve_view_config(
        {"preset": "offload", "max_message_bytes": 9000, "max_line_length": 50}
    )
    assert (config.style, config.max_message_bytes, config.max_line_length) == ("offload", 9000, 50)


def test_default_config_is_spec000():
    config = resolve_view_config(None)
    assert (config.max_message_bytes, config.max_line_length, config.style) == (51_200, 2000, "cut")
    assert (
        config.enabled and config.context_budget_tokens is None and config.trim_hysteresis == 0.25
    )


def test_unknown_preset_is_a_validation_error():
    with pytest.raises(EngineValidationError):
        resolve_view_config({"preset": "zip"})


@pytest.mark.parametrize(
    ("window", "budget"),
    [(8_000, 20_000), (32_000, 20_000), (128_000, 32_000), (200_000, 50_000), (1_000_000, 60_000)],
)
def test_budget_is_clamped_quarter_of_window_spec000(window, budget):
    assert tool_output_budget(ViewConfig(), window) == budget


def test_explicit_budget_wins():
    assert tool_output_budget(ViewConfig(context_budget_tokens=1234), 1_000_000) == 1234


def test_view_bytes_estimate_is_the_view_not_the_blob():
    assert view_bytes_estimate(1000, ViewConfig()) == 1000
    assert view_bytes_estimate(200 * 1024 * 1024, ViewConfig()) == 50 * 1024
    assert view_bytes_estimate(200 * 1024 * 1024, resolve_view_config({"preset": "offload"})) < 1000


# --- property tests for the cut ---------------------------------------------------------

line_text = st.text(
    alphabet=st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)), max_size=90
)


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(line_text, max_size=60),
    trailing=st.booleans(),
    max_bytes=st.integers(1, 4000),
    max_line=st.integers(1, 120),
)
def test_cut_view_properties(lines, trailing, max_bytes, max_line):
    text = "\n".join(lines) + ("\n" if trailing and lines else "")
    config = ViewConfig(max_message_bytes=max_bytes, max_line_length=max_line)
    info = info_for(text)
    view = make_view(iter_text_lines(text, max_line + 1), info, config)
    original = list(iter_text_lines(text))
    if view.is_full:
        # Nothing cut: every line fits and so does the whole.
        assert all(len(line) <= max_line for line in original)
        assert len("\n".join(original).encode()) <= max_bytes
        return
    assert view.state == "cut"
    assert REF in view.text
    if max_bytes >= notice_reserve(info, config) + 2:
        assert len(view.text.encode()) <= max_bytes
    shown = view.text.split("\n")[: view.lines_shown] if view.lines_shown else []
    # Shown lines are the first lines, in order, each a prefix cut at max_line characters.
    for got, want in zip(shown, original, strict=False):
        assert want.startswith(got)
        assert len(got) <= max_line
    assert view.lines_shown <= len(original)
    # Something really was cut.
    assert view.lines_shown < len(original) or view.lines_cut > 0


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(line_text, min_size=1, max_size=40), max_line=st.integers(1, 50))
def test_view_is_stable_whatever_the_head_lines_given(lines, max_line):
    """Feeding only max_line+1 characters per line (as storage does) gives the same view."""
    text = "\n".join(lines)
    config = ViewConfig(max_message_bytes=1500, max_line_length=max_line)
    full = make_view(iter_text_lines(text), info_for(text), config)
    heads = make_view(iter_text_lines(text, max_line + 1), info_for(text), config)
    assert full == heads


# --- placeholders -----------------------------------------------------------------------


def test_trimmed_placeholder_is_spec000_format():
    assert trimmed_view(REF) == f"[tool output trimmed; ref={REF}]"


def test_failure_view_names_tool_budget_exceeded_spec001():
    text = failed_view(OutputInfo(ref=REF, byte_size=5_000_000, line_count=10, tool_name="cat"))
    assert text.startswith(
        "[tool output not added: it would exceed the context budget (toolBudgetExceeded)"
    )
    assert f"ref={REF}" in text and "5,000,000 bytes" in text


def test_checkpoint2_trimmed_message_serializes_as_placeholder_in_every_format_spec000():
    call = Message(role="assistant", tool_calls=(ToolCall(id="c1", name="bash"),))
    trimmed = Message(
        role="tool",
        content="huge output " * 1000,
        tool_call_id="c1",
        name="bash",
        output_ref=REF,
        view=trimmed_view(REF),
        view_state="trimmed",
    )
    # The tool is defined: Anthropic refuses tool blocks in a request without tools.
    parts = ContextParts(
        model="m",
        max_output_tokens=100,
        messages=[Message(role="user", content="go"), call, trimmed],
        tools=[ToolDef(name="bash")],
    )
    anthropic = build_request("anthropic", parts)
    result = anthropic["messages"][-1]["content"][0]
    assert result == {"type": "tool_result", "tool_use_id": "c1", "content": trimmed_view(REF)}
    openai = build_request("openai", parts)
    assert openai["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": trimmed_view(REF),
    }
    raw = build_request("raw", parts)
    assert raw["messages"][-1]["content"] == trimmed_view(REF)
    assert raw["messages"][-1]["view"] == "trimmed" and raw["messages"][-1]["output_ref"] == REF
    for body in (anthropic, openai, raw):
        assert "huge output" not in str(body)


# --- the budget trim (docs/concepts/trimming.md#budget-trim) --------------------------------------


def cands(*tokens: int) -> list[TrimCandidate]:
    return [TrimCandidate(key=i, tokens=t) for i, t in enumerate(tokens)]


def test_nothing_is_trimmed_within_budget():
    plan = plan_trim(100, 100, cands(50, 50), hysteresis=0.25)
    assert plan.trimmed == () and not plan.changed and plan.total_after == 100


def test_oldest_are_trimmed_first_down_to_the_hysteresis_target():
    # budget 100, target 75: 40+30+20+20 = 110 → trim 40 (70 ≤ 75)
    plan = plan_trim(110, 100, cands(40, 30, 20, 20), hysteresis=0.25)
    assert plan.trimmed == (0,) and plan.total_after == 70 and plan.target == 75


def test_without_hysteresis_the_trim_stops_at_the_budget():
    plan = plan_trim(101, 100, cands(10, 10, 81), hysteresis=0.0)
    assert plan.trimmed == (0,) and plan.total_after == 91


def test_newest_output_is_never_trimmed():
    plan = plan_trim(500, 100, cands(10, 10, 480), hysteresis=0.25)
    assert plan.trimmed == (0, 1)
    assert plan.total_after == 480  # still over: only the newest is left


def test_candidates_are_read_lazily():
    consumed = []

    def gen():
        for c in cands(*[10] * 1000):
            consumed.append(c.key)
            yield c

    plan = plan_trim(10_000, 9_990, gen(), hysteresis=0.0)
    assert plan.trimmed == (0,)
    assert len(consumed) == 2  # the trimmed one plus one lookahead


def test_bad_budget_or_hysteresis_is_rejected():
    with pytest.raises(EngineValidationError):
        plan_trim(10, 0, [])
    with pytest.raises(EngineValidationError):
        plan_trim(10, 5, [], hysteresis=1.0)
    assert trim_target(100, 0.25) == 75


@settings(max_examples=300, deadline=None)
@given(
    tokens=st.lists(st.integers(0, 500), max_size=40),
    budget=st.integers(1, 2000),
    hysteresis=st.sampled_from([0.0, 0.1, 0.25, 0.5]),
)
def test_trim_plan_properties(tokens, budget, hysteresis):
    total = sum(tokens)
    plan = plan_trim(total, budget, cands(*tokens), hysteresis=hysteresis)
    n = len(plan.trimmed)
    # Oldest first: the trimmed keys are a prefix; the newest is never among them.
    assert plan.trimmed == tuple(range(n))
    assert n <= max(len(tokens) - 1, 0)
    assert plan.freed == sum(tokens[:n])
    assert plan.total_after == total - plan.freed
    if total <= budget:
        assert n == 0
    else:
        target = trim_target(budget, hysteresis)
        # Enough: at or under the target, unless only the newest is left.
        assert plan.total_after <= target or n == len(tokens) - 1
        # Minimal: one fewer trim would not have reached the target.
        if n:
            assert plan.total_after + tokens[n - 1] > target


def _replay(outputs: list[int], budget: int, hysteresis: float) -> tuple[int, list[set[int]]]:
    """Append outputs one per turn; return (turns whose trim changed the prefix, trimmed sets)."""
    trimmed: set[int] = set()
    total = 0
    changes = 0
    history = []
    for i, t in enumerate(outputs):
        total += t
        live = [TrimCandidate(key=j, tokens=outputs[j]) for j in range(i + 1) if j not in trimmed]
        plan = plan_trim(total, budget, live, hysteresis=hysteresis)
        trimmed.update(plan.trimmed)
        total = plan.total_after
        changes += plan.changed
        history.append(set(trimmed))
    return changes, history


@settings(max_examples=150, deadline=None)
@given(
    outputs=st.lists(st.integers(1, 400), min_size=1, max_size=60), budget=st.integers(400, 3000)
)
def test_once_trimmed_an_output_stays_trimmed(outputs, budget):
    _, history = _replay(outputs, budget, 0.25)
    for before, after in zip(history, history[1:], strict=False):
        assert before <= after
    for trimmed in history:
        # Trimmed outputs are always the oldest ones.
        assert trimmed == set(range(len(trimmed)))


def test_hysteresis_moves_the_prefix_less_often():
    outputs = [300] * 200
    with_h, _ = _replay(outputs, 3000, 0.25)
    without, _ = _replay(outputs, 3000, 0.0)
    assert without > 150  # every turn once the budget is reached
    assert with_h < without / 3


def test_derived_trim_budget_is_capped_at_half_the_effective_window():
    """The clamp's floor (docs/concepts/trimming.md#tool-output-budget) (20,000) exceeds a 16k
    window's effective window; capped at half of it, trimming can run. Large windows keep the
    clamp's figure."""
    assert tool_output_budget(ViewConfig(), 16_000, 13_000) == 6_500
    assert tool_output_budget(ViewConfig(), 200_000, 200_000 - 64_000 - 8_192) == 50_000
    assert tool_output_budget(ViewConfig(), 128_000, 128_000 - 32_000 - 8_192) == 32_000
    # an explicit budget is taken as given
    assert tool_output_budget(ViewConfig(context_budget_tokens=30_000), 16_000, 13_000) == 30_000


def test_an_output_smaller_than_its_placeholder_saves_is_never_trimmed():
    # The case: a 234-byte output (~60 tokens) behind a ~20-token placeholder
    # would save ~40 tokens: below MIN_TRIM_SAVING, so it stays and the next goes.
    small = TrimCandidate(key="small", tokens=60, placeholder_tokens=20)
    big = TrimCandidate(key="big", tokens=900, placeholder_tokens=20)
    newest = TrimCandidate(key="new", tokens=500, placeholder_tokens=20)
    plan = plan_trim(1_460, 1_000, [small, big, newest], min_saving=MIN_TRIM_SAVING)
    assert plan.trimmed == ("big",)
    assert plan.freed == 900 and plan.total_after == 560
    # Saving less than the placeholder's own size is refused too.
    tiny = TrimCandidate(key="t", tokens=150, placeholder_tokens=80)
    assert not tiny.worth_trimming(0) and not small.worth_trimming(MIN_TRIM_SAVING)
    assert big.worth_trimming(MIN_TRIM_SAVING)


@settings(max_examples=200, deadline=None)
@given(
    tokens=st.lists(st.integers(0, 400), max_size=30),
    placeholder=st.integers(0, 60),
    budget=st.integers(1, 2000),
)
def test_trim_never_targets_an_output_smaller_than_its_placeholder_saves(
    tokens, placeholder, budget
):
    candidates = [
        TrimCandidate(key=i, tokens=t, placeholder_tokens=placeholder) for i, t in enumerate(tokens)
    ]
    plan = plan_trim(sum(tokens), budget, candidates, min_saving=MIN_TRIM_SAVING)
    for key in plan.trimmed:
        assert tokens[key] - placeholder >= max(MIN_TRIM_SAVING, placeholder)
    assert plan.freed == sum(tokens[k] for k in plan.trimmed)
    assert len(tokens) - 1 not in plan.trimmed or not tokens
