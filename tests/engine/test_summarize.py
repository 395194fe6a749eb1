"""Summary prompts, request preparation, tag extraction, the offline summariser.

docs/concepts/compaction.md#summary-request (interrupt, directives, <retain>/<summary>),
docs/concepts/compaction.md#compression-prompt (compression prompt).
"""

from __future__ import annotations

import pytest

from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.messages import Message, ToolCall
from contextsvc.engine.offline_summarizer import OfflineSummarizer
from contextsvc.engine.summarize import (
    DEFAULT_COMPRESSION_PROMPT,
    DEFAULT_RETAIN_PROMPT,
    DEFAULT_SUMMARY_PROMPT,
    PromptConfig,
    build_compression_prompt,
    build_interrupt,
    extract_retain_summary,
    make_compress_request,
    make_retain_summary_request,
    render_for_llm,
)


def test_interrupt_default_has_retain_then_summary_spec000_2_6():
    text = build_interrupt(PromptConfig())
    assert text.index(DEFAULT_RETAIN_PROMPT) < text.index(DEFAULT_SUMMARY_PROMPT)
    assert "<retain></retain>" in text and "<summary></summary>" in text


def test_interrupt_directives_are_appended_as_bullets_spec000_2_6_3():
    config = PromptConfig(
        summary_prompt="Summarise in <summary> tags.",
        summary_directives=("Keep file paths", " Keep errors "),
        retain_prompt="List in <retain> tags.",
        retain_directives=("Keep refs",),
        instructions="Focus on the parser",
    )
    assert build_interrupt(config) == (
        "List in <retain> tags.\n\n- Keep refs\n\nSummarise in <summary> tags.\n\n"
        "Additional instructions:\n- Keep file paths\n- Keep errors\n- Focus on the parser"
    )


def test_empty_retain_prompt_disables_the_retain_section_spec000_2_6_4():
    config = PromptConfig(retain_prompt="", retain_directives=("ignored",))
    text = build_interrupt(config)
    assert "<retain>" not in text and "ignored" not in text


@pytest.mark.parametrize(
    "answer, retain, summary",
    [
        ("<retain>\n- a\n</retain>\n<summary>\nS\n</summary>", "- a", "S"),
        ("<summary>S only</summary>", "", "S only"),
        ("<retain>r</retain> free text summary", "r", "free text summary"),
        ("<retain>r</retain><summary>cut at max_tokens", "r", "cut at max_tokens"),
        ("no tags at all", "", "no tags at all"),
    ],
)
def test_extract_retain_and_summary_spec000_2_6_4(answer, retain, summary):
    assert extract_retain_summary(answer) == (retain, summary)


def test_render_for_llm_turns_tool_blocks_into_text():
    msgs = [
        Message(
            role="assistant",
            content="Looking",
            tool_calls=(ToolCall("c1", "bash", {"command": "ls"}),),
        ),
        Message(role="tool", content="a.py", tool_call_id="c1", name="bash", output_ref="ref9"),
        Message(role="assistant", content=""),  # empty text would be rejected by the API
    ]
    out = render_for_llm(msgs)
    assert [m.role for m in out] == ["user", "assistant", "user"]
    assert out[1].text == 'Looking\n[tool call bash id=c1: {"command":"ls"}]'
    assert out[2].text == "[tool result bash id=c1 ref=ref9]\na.py"
    assert all(not m.tool_calls for m in out)


def test_compression_prompt_is_spec004_and_safe_with_braces():
    msgs = [
        Message(role="user", content="use {formatted_messages} and {x}"),
        Message(role="assistant", content="ok"),
    ]
    prompt = build_compression_prompt(msgs)
    head = DEFAULT_COMPRESSION_PROMPT.split("{formatted_messages}")[0]
    assert prompt.startswith(head)
    assert "user: use {formatted_messages} and {x}\n\nassistant: ok\n---" in prompt
    with pytest.raises(EngineValidationError):
        PromptConfig(compression_prompt="no placeholder")


def test_empty_input_is_validation_error_cx_nt2():
    with pytest.raises(EngineValidationError, match="Conversation has no messages"):
        make_retain_summary_request([], PromptConfig(), model="m", max_tokens=10)
    with pytest.raises(EngineValidationError):
        make_compress_request([], PromptConfig(), model="m", max_tokens=10)
    # A lone tool-calling message is stripped (docs/concepts/compaction.md#strip-trailing-calls):
    # nothing is left either.
    only_call = [Message(role="assistant", tool_calls=(ToolCall("c", "t"),))]
    with pytest.raises(EngineValidationError):
        make_retain_summary_request(only_call, PromptConfig(), model="m", max_tokens=10)


def test_offline_summary_is_bounded_and_compress_has_no_tags():
    msgs = [
        Message(role="user", content=f"request {i} about src/m{i}.py " + "word " * 200)
        for i in range(200)
    ]
    request = make_retain_summary_request(msgs, PromptConfig(), model="", max_tokens=500)
    text = OfflineSummarizer().complete(request).text
    assert len(text) <= 500 * 4 and "<summary>" in text
    # The requests past the room are indexed with the way in, not silently cut.
    assert "earlier items not listed" in text and "reachable with history_search" in text
    assert "request 199" in text  # the newest items are the ones kept
    compress = OfflineSummarizer().complete(
        make_compress_request(msgs, PromptConfig(), model="", max_tokens=500)
    )
    assert "<summary>" not in compress.text and compress.text.startswith(
        "Summary of 200 earlier messages"
    )
