"""Responses output items the proxy makes: the round-limit note, the final report as a message.

Each item's id comes from what it says: a stream's filter and the whole answer
make the same item, so the client's echo of it matches (``client_message``).
"""

from __future__ import annotations

import hashlib
from typing import Any

from .report import report_text


def responses_with_note(response: dict[str, Any], note: str) -> dict[str, Any]:
    """A Responses response with the round-limit note as a last message item."""
    return {**response, "output": [*(response.get("output") or ()), note_item(note)]}


def note_item(note: str) -> dict[str, Any]:
    """The note as a Responses output item (an assistant message).

    Its id comes from the note itself: a stream's filter and the stored reply
    make the same item, so the client's echo of it matches (``client_message``).
    """
    return {
        "type": "message",
        "id": f"msg_limit_{hashlib.sha256(note.encode()).hexdigest()[:24]}",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": note, "annotations": []}],
    }


def report_item(call: dict[str, Any]) -> dict[str, Any]:
    """A Responses ``function_call`` item of the final report as an assistant message item.

    Its id comes from the call's: the stream's filter and the whole answer make
    the same item, so the client's echo of it matches (``client_message``).
    """
    key = str(call.get("call_id") or call.get("id") or call.get("arguments") or "")
    text = report_text(call.get("arguments"))
    return {
        "type": "message",
        "id": f"msg_report_{hashlib.sha256(key.encode()).hexdigest()[:24]}",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def responses_as_text(response: dict[str, Any], name: str) -> dict[str, Any]:
    """A Responses answer with its ``function_call`` items of ``name`` turned into messages."""
    output = [
        report_item(item)
        if isinstance(item, dict)
        and item.get("type") == "function_call"
        and item.get("name") == name
        else item
        for item in response.get("output") or ()
    ]
    return {**response, "output": output}
