"""Views (docs/concepts/trimming.md#views, docs/concepts/guard.md#tool-preflight), pure: whole
views, image placeholders, trim switch."""

from __future__ import annotations

from contextsvc.engine.output_sources import stored_text, whole_view_config
from contextsvc.engine.output_views import (
    OutputInfo,
    ViewConfig,
    iter_text_lines,
    make_view,
    resolve_view_config,
)


def view_of(text: str, config: ViewConfig):
    info = OutputInfo(ref="out_1", byte_size=len(text.encode()), line_count=text.count("\n"))
    return make_view(iter_text_lines(text, config.max_line_length + 1), info, config)


def test_spec000_1_6_whole_view_config_shows_a_long_page_uncut():
    page = "".join(f"{i:>6}\t" + "x" * 3000 + "\n" for i in range(40))  # 120 KB, long lines
    config = ViewConfig()
    assert view_of(page, config).state == "cut"
    assert view_of(page, whole_view_config(config, page)).is_full
    offload = ViewConfig(style="offload", max_message_bytes=4096)
    assert view_of(page, whole_view_config(offload, page)).is_full


def test_spec000_1_5_stored_text_keeps_an_image_placeholder():
    content = [
        {"type": "text", "text": "Screenshot of the page:"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}},
        {"type": "text", "text": "done"},
    ]
    assert stored_text(content) == "Screenshot of the page:\n[image]\ndone"
    assert stored_text([{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]) == (
        "[image]"
    )
    assert stored_text([{"type": "document", "source": {}}]) == "[document]"
    assert stored_text("plain") == "plain"


def test_spec000_1_7_budget_trim_switch_is_a_policy_field_defaulting_on():
    assert resolve_view_config({}).budget_trim is True
    config = resolve_view_config({"budget_trim": False, "max_line_length": 10})
    assert config.budget_trim is False and config.max_line_length == 10  # cuts stay
