"""What a tool result's view is made from, and when it is not cut (docs/concepts/trimming.md#views).

(A built-in tool's result is not a stored output: ``engine.builtin_results``.)

- A result with images is stored as text with ``[image]`` where each was, so a
  cut or trimmed view, and a read of the ref, still say there was one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .output_views import ViewConfig


def whole_view_config(config: ViewConfig, text: str) -> ViewConfig:
    """A config under which ``text`` is shown whole (nothing to cut), the rest unchanged."""
    size = 4 * len(text) + 1  # UTF-8 takes at most 4 bytes a character
    return replace(
        config, max_message_bytes=size, max_line_length=size, style="cut", view_tokens=None
    )


def stored_text(content: str | list[dict[str, Any]]) -> str:
    """The text kept for a tool result: its text parts, with ``[image]`` (``[<type>]``
    for other media) where a media part was, so a view or a read of the stored
    output still says there was one."""
    if isinstance(content, str):
        return content
    pieces: list[str] = []
    for part in content:
        kind = part.get("type", "text")
        if kind == "text":
            pieces.append(str(part.get("text", "")))
        elif kind in ("image", "image_url", "input_image"):
            pieces.append(MEDIA_PLACEHOLDER)
        elif kind in _OTHER_MEDIA:
            pieces.append(f"[{_OTHER_MEDIA[kind]}]")
    return "\n".join(pieces)


# Where a tool result's image was, in its stored text.
MEDIA_PLACEHOLDER = "[image]"
_OTHER_MEDIA = {
    "document": "document",
    "file": "file",
    "input_file": "file",
    "input_audio": "audio",
    "audio": "audio",
}
