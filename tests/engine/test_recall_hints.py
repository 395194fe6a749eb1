"""The context always says how to reach what left it: the search tool named under every
summary (once), lists past their room indexed rather than cut, and cut views that keep
the lines naming paths and ids."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from contextsvc.engine.build import ContextParts, build_request
from contextsvc.engine.messages import Message
from contextsvc.engine.offline_summarizer import RETAIN_MORE, OfflineSummarizer
from contextsvc.engine.output_fit import capped_view, head_tail_view
from contextsvc.engine.output_views import (
    OutputInfo,
    ViewConfig,
    iter_text_lines,
    make_view,
)
from contextsvc.engine.recall import (
    SEARCH_HINT,
    SEARCH_HINT_SHORT,
    SEARCH_TOOL_NAME,
    search_available,
    with_search_hint,
)
from contextsvc.engine.strategies.base import CompactionConfig, StrategyContext, Window
from contextsvc.engine.strategies.summary import summarize
from contextsvc.engine.summarize import (
    PromptConfig,
    SummaryRequest,
    SummaryResult,
    extract_retain_summary,
    make_compress_request,
    make_retain_summary_request,
)
from contextsvc.engine.summary_merge import merge_retained
from contextsvc.engine.tokens import approx_tokens
from tests.engine.test_strategies import COUNTER, call, numbered, result, say, user

# --- the hint where the summary enters the context ----------------------------------


def test_with_search_hint_adds_the_hint_once_and_is_idempotent():
    once = with_search_hint("We fixed the parser.")
    assert once.endswith(SEARCH_HINT) and once.count(SEARCH_HINT) == 1
    assert with_search_hint(once) == once  # stable: the same bytes on every render
    # A copy the summariser wrote (twice, in two merged parts) leaves one hint, at the end.
    copied = f"Part one.\n{SEARCH_HINT}\n\n[Later in the session]\nPart two.\n\n{SEARCH_HINT}"
    assert with_search_hint(copied).count(SEARCH_HINT) == 1
    assert with_search_hint("") == ""
    # No search tool for this agent: no hint, and a copied one is taken out.
    assert SEARCH_TOOL_NAME not in with_search_hint(copied, search=False)


def test_search_is_off_without_the_proxy_builtins_or_the_output_cache():
    assert search_available(None) and search_available({"proxy": {"builtin_tools": True}})
    assert not search_available({"proxy": {"builtin_tools": False}})
    assert not search_available({"tool_output_cache": {"enabled": False}})


def _sent_texts(body: dict) -> str:
    return str(body)


def test_the_built_context_names_the_search_tool_under_the_summary_in_every_role_and_format():
    for role in ("user", "system"):
        parts = ContextParts(
            model="m", max_output_tokens=100, summary="Plan B.", messages=[user("go on")]
        )
        parts.summary_role = role
        for fmt in ("anthropic", "openai", "responses"):
            sent = _sent_texts(build_request(fmt, parts))
            assert sent.count(SEARCH_TOOL_NAME) == 1, (role, fmt)
        parts.search_hint = False
        assert SEARCH_TOOL_NAME not in _sent_texts(build_request("anthropic", parts))


@dataclass
class CopyingLLM:
    """An LLM summariser that never writes the hint itself, or copies it from what it read."""

    copy_hint: bool = False
    requests: list[SummaryRequest] = field(default_factory=list)

    name: str = "llm"

    def complete(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        n = len(self.requests)
        body = f"Summary {n}: the parser is fixed, ref=out_{n:03d} holds the log."
        if self.copy_hint:
            body += f"\n\n{SEARCH_HINT}"
        text = f"<retain>\n- keep src/p{n}.py\n</retain>\n<summary>\n{body}\n</summary>"
        return SummaryResult(text=text, model="llm", summarizer=self.name)


def _turns(start: int, count: int) -> list[Message]:
    msgs: list[Message] = []
    for t in range(start, start + count):
        msgs += [user(f"Turn {t}: fix src/p{t}.py"), call(f"c{t}"), result(f"c{t}", "ok " * 300)]
        msgs.append(say(f"Turn {t} done."))
    return msgs


def test_an_llm_summary_without_the_hint_gets_it_once_and_only_once_after_two_compactions():
    for llm in (CopyingLLM(), CopyingLLM(copy_hint=True)):
        ctx = StrategyContext(
            counter=COUNTER,
            config=CompactionConfig(pin_task=False),
            summarizer=llm,
            target_tokens=10,
        )
        window = Window(numbered(_turns(0, 4)))
        first = summarize(window, ctx).window
        second_in = first.with_messages(numbered([*first.messages, *_turns(4, 3)]))
        second = summarize(second_in, ctx).window
        assert "Summary 1" in second.summary and "Summary 2" in second.summary
        for fmt in ("anthropic", "openai"):
            parts = ContextParts(
                model="m",
                max_output_tokens=100,
                retain=second.retain,
                summary=second.summary,
                messages=second.messages,
            )
            assert str(build_request(fmt, parts)).count(SEARCH_HINT) == 1, (llm, fmt)
        # What is counted is what is sent: the window's preamble has the hint too.
        assert sum(m.context_text.count(SEARCH_HINT) for m in second.preamble()) == 1
        # The summary call was told the hint is added for it.
        assert SEARCH_TOOL_NAME in llm.requests[-1].prompt


# --- lists past their room ------------------------------------------------------------


def _long_run(outputs: int = 60) -> list[Message]:
    msgs = [user("Fix the build; the logs are under /var/log/build.")]
    for i in range(outputs):
        tool = "Read" if i % 3 == 0 else "Bash"
        msgs.append(call(f"c{i}", name=tool, args={"command": f"make step{i} > /tmp/step{i}.log"}))
        msgs.append(
            result(
                f"c{i}",
                f"step {i} ok\nFull output saved to: /root/.claude/tool-results/r{i}.txt",
                name=tool,
                ref=f"out_{i:04d}abcdefghij",
            )
        )
    return numbered(msgs)


def test_a_summary_past_its_room_lists_a_compact_index_naming_history_search():
    msgs = _long_run()
    request = make_compress_request(msgs, PromptConfig(), model="", max_tokens=512)
    text = OfflineSummarizer().complete(request).text
    refs = text.split("Output refs:\n", 1)[1].split("\n\n", 1)[0].split("\n")
    index, listed = refs[0], refs[1:]
    assert listed and all(line.startswith("- out_") for line in listed)
    assert listed[-1] == "- out_0059abcdefghij"  # the newest are the ones listed
    earlier = 60 - len(listed)
    assert index.startswith(f"- {earlier} earlier outputs not listed (seq 3–")
    assert re.search(r"Bash ×\d+, Read ×\d+", index)
    assert index.endswith(f": reachable with {SEARCH_TOOL_NAME}")
    assert "omitted" not in text
    # Every other list cut to its room says the same, with its seq range.
    assert re.search(r"- \d+ earlier items not listed \(seq \d+–\d+\): reachable", text)


def test_the_index_names_the_paths_the_earlier_outputs_named():
    # The service's default summary size (512 tokens): the index still names paths,
    # the newest of the unlisted outputs first.
    request = make_compress_request(_long_run(), PromptConfig(), model="", max_tokens=512)
    text = OfflineSummarizer().complete(request).text
    index = next(line for line in text.split("\n") if "earlier outputs not listed" in line)
    named = index.split("; named ", 1)[1]
    assert re.match(r"/(tmp/step\d+\.log|root/\.claude/tool-results/r\d+\.txt)", named)
    assert index.endswith(f": reachable with {SEARCH_TOOL_NAME}")


def test_without_the_search_tool_the_index_stays_and_names_no_tool():
    request = make_retain_summary_request(
        _long_run(), PromptConfig(), model="", max_tokens=512, search_hint=False
    )
    text = OfflineSummarizer().complete(request).text
    assert "earlier outputs not listed (seq" in text and SEARCH_TOOL_NAME not in text
    assert SEARCH_TOOL_NAME not in request.prompt


def test_a_retain_block_past_its_room_says_so_once_even_when_merged():
    msgs = numbered([user(f"request {i} about src/m{i}.py " + "word " * 20) for i in range(80)])
    request = make_retain_summary_request(msgs, PromptConfig(), model="", max_tokens=500)
    retain, _ = extract_retain_summary(OfflineSummarizer().complete(request).text)
    more = f"- ({RETAIN_MORE}: {SEARCH_TOOL_NAME} finds them)"
    assert retain.endswith(more)
    # The same words on every compaction: a merged retain block keeps one copy.
    assert merge_retained(retain, retain.replace("request 0 ", "request 0b ")).count(more) == 1


# --- cut views keep the lines that say where things are -------------------------------


def _log_with_pointers(lines: int = 5_000) -> tuple[str, list[str]]:
    out = [f"line {i:05d} of the build log: step ok" for i in range(1, lines + 1)]
    out[2_500] = "Full output saved to: /root/.claude/projects/p/tool-results/abc.txt"
    out[3_100] = "report written to out/report.json"
    return "\n".join(out), out


def check_view(view: str, lines: list[str]) -> int:
    """Every shown line is the output's line at the number the markers imply, in
    order; every marker's range starts where the shown lines stopped. The count of
    shown lines."""
    expected, shown = 1, 0
    for line in view.split("\n"):
        marker = re.match(r"\[… lines ([\d,]+)-([\d,]+)", line)
        if marker:
            first, last = (int(g.replace(",", "")) for g in marker.groups())
            assert first == expected and last >= first
            expected = last + 1
            continue
        assert line == lines[expected - 1], (expected, line)
        expected += 1
        shown += 1
    assert expected - 1 == len(lines)
    return shown


def test_a_cut_view_of_a_5000_line_output_keeps_a_path_line_from_its_middle_within_budget():
    text, lines = _log_with_pointers()
    view = head_tail_view(text, "out_x", 600, approx_tokens)
    assert view is not None and approx_tokens(view) <= 600
    assert "Full output saved to: /root/.claude/projects/p/tool-results/abc.txt" in view
    assert "report written to out/report.json" in view
    assert view.startswith("line 00001") and view.endswith("line 05000 of the build log: step ok")
    check_view(view, lines)
    assert "ref=out_x" in view and "tool_output_cache" in view and SEARCH_HINT_SHORT in view
    assert view.count(SEARCH_HINT_SHORT) == 1  # once per view, not per gap


def test_a_capped_view_keeps_the_middle_pointer_with_the_stored_line_numbers():
    text, lines = _log_with_pointers()
    info = OutputInfo(ref="out_abc", byte_size=len(text), line_count=len(lines))
    config = ViewConfig(view_tokens=300)
    view = capped_view(make_view(iter_text_lines(text, 2_001), info, config), text, info, config)
    assert view.state == "cut" and approx_tokens(view.text) <= 300
    assert "Full output saved to: /root/.claude/projects/p/tool-results/abc.txt" in view.text
    assert check_view(view.text, lines) == view.lines_shown
    # A large output: only its ends are read whole, the middle (up to MAX_SCAN_CHARS
    # of it) is searched.
    big = [f"row {i:07d}" for i in range(80_000)]
    big[40_000] = "artifact id: 4f2a9c1e77b0 uploaded to https://ci.example/run/9"
    info = OutputInfo(ref="out_b", byte_size=len("\n".join(big)), line_count=len(big))
    huge = capped_view(make_view(iter([]), info, config), "\n".join(big), info, config)
    assert big[40_000] in huge.text and approx_tokens(huge.text) <= 300
    check_view(huge.text, big)
    # A huge one (2.4 MB): the middle's ends are searched, numbered across the gap.
    big = [f"row {i:07d}" for i in range(200_000)]
    big[199_000] = "Full output saved to: /root/.claude/projects/p/tool-results/zz.txt"
    info = OutputInfo(ref="out_h", byte_size=len("\n".join(big)), line_count=len(big))
    huge = capped_view(make_view(iter([]), info, config), "\n".join(big), info, config)
    assert big[199_000] in huge.text
    check_view(huge.text, big)


def test_a_cut_notice_names_the_search_tool_only_when_the_agent_has_it():
    text, _ = _log_with_pointers()
    info = OutputInfo(ref="out_c", byte_size=len(text), line_count=5_000)
    for search in (True, False):
        config = ViewConfig(max_message_bytes=4_096, search_hint=search)
        view = make_view(iter_text_lines(text, 2_001), info, config)
        assert len(view.text.encode()) <= 4_096
        assert (SEARCH_HINT_SHORT in view.text) is search
        capped = capped_view(view, text, info, ViewConfig(view_tokens=300, search_hint=search))
        assert (SEARCH_TOOL_NAME in capped.text) is search


_LINE = st.text(alphabet="abc xyz/._:=019-İé", max_size=60)


@settings(max_examples=60, deadline=None)
@given(lines=st.lists(_LINE, min_size=3, max_size=400), cap=st.integers(200, 900))
def test_any_output_cut_view_fits_its_budget_and_shows_its_own_lines_in_order(lines, cap):
    text = "\n".join(lines)
    info = OutputInfo(ref="out_p", byte_size=len(text.encode()), line_count=len(lines))
    config = ViewConfig(view_tokens=cap)
    view = capped_view(make_view(iter_text_lines(text, 2_001), info, config), text, info, config)
    if view.state == "cut" and view.text is not None and "[… lines " in view.text:
        assert approx_tokens(view.text) <= max(cap, 200)
        check_view(view.text, lines)
    fitted = head_tail_view(text, "out_p", cap, approx_tokens)
    if fitted is not None:
        assert approx_tokens(fitted) <= cap
        check_view(fitted, text.split("\n"))
