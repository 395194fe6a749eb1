"""A final report's text, and text put after an answer's: what the provider objects and the
proxy's services share (``services.final``, ``services.reply``)."""

from __future__ import annotations

import json
from typing import Any


def report_text(arguments: Any) -> str:
    """The report of a final-report call (its ``report``; else its arguments as JSON text)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return arguments
    if isinstance(arguments, dict) and isinstance(arguments.get("report"), str):
        return arguments["report"]
    return json.dumps(arguments, ensure_ascii=False)


def with_text(content: Any, text: str) -> Any:
    """``content`` (a string or parts) with ``text`` after it: a part, or a paragraph."""
    if isinstance(content, list):
        return [*content, {"type": "text", "text": text}]
    content = content or ""
    return f"{content}\n\n{text}" if content.strip() else text
