"""docs/concepts/deferral.md#tool-search: deferred tools stay discoverable — the "## Available
Tools" listing and search hints."""

from __future__ import annotations

import pytest

from contextsvc.engine.deferral import (
    AVAILABLE_TOOLS_HEADING,
    DEFERRAL_NOTE,
    assemble,
    choose_deferred,
    deferral_note,
    first_sentence,
    listing_tokens,
)
from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.messages import ToolDef
from contextsvc.engine.tool_index import build_index, search


def T(name: str, description: str, hint: str = "") -> ToolDef:
    return ToolDef(name=name, description=description, category="mcp", search_hint=hint)


@pytest.mark.parametrize(
    ("description", "sentence"),
    [
        ("Create an issue. It talks to GitHub.", "Create an issue."),
        ("List pods!\nThen more lines.", "List pods!"),
        ("Version 1.2 of the build tool. Fast.", "Version 1.2 of the build tool."),
        ("No full stop at all", "No full stop at all"),
        ("", ""),
    ],
)
def test_s002_5_first_sentence_of_a_description(description, sentence):
    assert first_sentence(description) == sentence


def test_s002_5_long_first_sentence_is_cut_short():
    sentence = first_sentence("word " * 200)
    assert len(sentence) == 200 and sentence.endswith("…")


def test_s002_5_note_lists_deferred_tools_under_available_tools():
    tools = [T("mcp__gh__create", "Create an issue. Then more."), T("mcp__k8s__pods", "")]
    note = deferral_note(tools)
    assert note == (
        f"{DEFERRAL_NOTE.format(n=2)}\n\n{AVAILABLE_TOOLS_HEADING}\n"
        "- mcp__gh__create: Create an issue.\n- mcp__k8s__pods"
    )


def test_s002_5_count_style_is_the_one_line_note():
    assert deferral_note([T("a", "A.")], style="count") == DEFERRAL_NOTE.format(n=1)
    assert deferral_note([], style="list") is None
    with pytest.raises(EngineValidationError):
        deferral_note([T("a", "A.")], style="table")


def test_s002_5_listing_names_only_tools_still_deferred():
    tools = [T("m1", "One."), T("m2", "Two."), T("m3", "Three.")]
    sel = assemble(tools, {t.name: 100 for t in tools}, ["m3", "m2"], ["m3"], scale=1.0)
    assert sel.note.endswith(f"{AVAILABLE_TOOLS_HEADING}\n- m2: Two.")


def test_s002_5_listing_is_counted_with_the_tool_descriptions_sent():
    tools = [T("m1", "One."), T("m2", "Two.")]
    tokens = {t.name: 100 for t in tools}
    listed = assemble(tools, tokens, ["m2"], scale=1.0, search_tool_tokens=10)
    counted = assemble(tools, tokens, ["m2"], scale=1.0, search_tool_tokens=10, note_style="count")
    extra = listing_tokens(None, "list") + listing_tokens(tools[1], "list")
    assert listed.tokens_sent == counted.tokens_sent + extra == 110 + extra


def test_s002_5_deferring_accounts_for_the_listing_it_adds():
    tools = [T(f"m{i}", "Short.") for i in range(4)]
    tokens = {t.name: 100 for t in tools}
    limit = 215
    for style in ("list", "count"):
        deferred = choose_deferred(
            tools, tokens, {}, limit_tokens=limit, scale=1.0, note_style=style
        )
        sel = assemble(tools, tokens, deferred, scale=1.0, note_style=style)
        assert sel.tokens_sent <= limit, style
    listed = choose_deferred(tools, tokens, {}, limit_tokens=limit, scale=1.0, note_style="list")
    counted = choose_deferred(tools, tokens, {}, limit_tokens=limit, scale=1.0, note_style="count")
    assert len(listed) == 3 and len(counted) == 2  # the listing costs room


def test_s002_5_search_hint_finds_a_tool_its_words_do_not():
    tools = [
        T("mcp__acme__run", "Runs a job on the Acme platform.", hint="deploy release ship"),
        T("mcp__acme__logs", "Fetches job output from the Acme platform."),
    ]
    hits = search(build_index(tools), "ship the release")
    assert [h.tool.name for h in hits] == ["mcp__acme__run"]
    # Without the hint nothing matches those words.
    bare = [ToolDef(name=t.name, description=t.description, category="mcp") for t in tools]
    assert search(build_index(bare), "ship the release") == []
