"""Content parts across providers: each format's build keeps only parts that provider takes.

A transcript keeps a provider's non-text parts as they came (Anthropic
thinking with its signature, server tool blocks, images; OpenAI refusals,
``image_url``, audio, files). A build for the other provider must not pass
them on as they are — the API would reject the request — so:

- to OpenAI: images of either form go as ``image_url`` parts (of user
  messages: an assistant message takes text and refusals only); refusals stay
  on assistant messages; thinking and every other Anthropic block are left out;
- to Anthropic: a refusal is the text the model said; an ``image_url`` is an
  ``image`` (URL or base64 source); OpenAI's audio and files are left out;
  Anthropic's own blocks pass through;
- Gemini parts with no neutral form (``{"type": "gemini"}``) go to neither.
"""

from __future__ import annotations

import re
from typing import Any

# OpenAI-only part types (Chat Completions' content parts).
_OPENAI_ONLY = frozenset({"image_url", "input_audio", "file", "refusal", "audio"})
_DATA_URL = re.compile(r"^data:(?P<media>[\w/+.-]+);base64,(?P<data>.*)$", re.DOTALL)


def anthropic_part(part: dict[str, Any]) -> dict[str, Any] | None:
    """``part`` as an Anthropic content block, or None to leave it out."""
    kind = part.get("type", "text")
    if kind == "gemini":
        return None  # a Gemini part with no neutral form (files, code execution …)
    if kind not in _OPENAI_ONLY:
        return dict(part)
    if kind == "refusal":
        text = str(part.get("refusal") or "")
        return {"type": "text", "text": text} if text.strip() else None
    if kind == "image_url":
        url = str((part.get("image_url") or {}).get("url") or "")
        data = _DATA_URL.match(url)
        if data:
            source = {"type": "base64", "media_type": data["media"], "data": data["data"]}
            return {"type": "image", "source": source}
        if url.startswith(("http://", "https://")):
            return {"type": "image", "source": {"type": "url", "url": url}}
    return None


def openai_part(part: dict[str, Any], role: str) -> dict[str, Any] | None:
    """``part`` as a Chat Completions content part of a ``role`` message, or None."""
    kind = part.get("type", "text")
    if role == "assistant":
        return dict(part) if kind == "refusal" else None
    if kind in _OPENAI_ONLY - {"refusal"}:
        return dict(part)
    if kind == "image":
        source = part.get("source") or {}
        if source.get("type") == "url" and source.get("url"):
            return {"type": "image_url", "image_url": {"url": source["url"]}}
        if source.get("type") == "base64" and source.get("data"):
            url = f"data:{source.get('media_type', 'image/png')};base64,{source['data']}"
            return {"type": "image_url", "image_url": {"url": url}}
    return None
