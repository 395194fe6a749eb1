"""The opaque ``encrypted_content`` of the compaction items the proxy hands out: our summary, signed.

A Responses client that asks for server-side compaction gets a
``compaction`` item whose content is this token; when it sends the item back,
the proxy expands it into the summary before anything goes upstream (no
upstream could read it). Signed with the service's secret, so a token is
only ever one this service made; compressed, as the API's own items are
large too.
"""

from __future__ import annotations

from typing import Any

from django.core import signing

SALT = "contextsvc.proxy.responses.compaction"
PREFIX = "cs1."
HEADER = "[Summary of the earlier conversation (compacted by contextsvc)]"
# When the session's own summary is that one, the context's preamble carries it already.
POINTER = "[The conversation before this point was compacted: its summary is above.]"


def compaction_token(*, session_id: str, summary: str) -> str:
    return PREFIX + signing.dumps({"s": session_id, "t": summary}, salt=SALT, compress=True)


def expanded_summary(item: dict[str, Any], current: str | None = None) -> str | None:
    """The summary a compaction item of ours stands for (None: not ours, or tampered with).

    ``current`` is the session's summary: the same text is not sent twice.
    """
    content = item.get("encrypted_content")
    if not isinstance(content, str) or not content.startswith(PREFIX):
        return None
    try:
        data = signing.loads(content[len(PREFIX) :], salt=SALT)
    except signing.BadSignature:
        return None
    text = data.get("t") if isinstance(data, dict) else None
    if not isinstance(text, str):
        return None
    return POINTER if current and text == current else f"{HEADER}\n{text}"
