"""Non-text parts: thinking and refusals are text to the estimate, not media; a build passes
only the parts its provider takes (``contextsvc.engine.parts``)."""

from __future__ import annotations

import hashlib

from contextsvc.engine.build import ContextParts, build_request
from contextsvc.engine.messages import Message
from contextsvc.engine.tokens import DEFAULT_ESTIMATE_CONFIG, estimate_message, get_tokenizer
from fakes.anthropic_rules import validate
from fakes.openai_rules import validate_chat

_THOUGHT = "The user wants a fix. " * 30
# Signed as the fake Messages server signs (it rejects a made-up signature, as the API does).
THINKING = {
    "type": "thinking",
    "thinking": _THOUGHT,
    "signature": hashlib.sha256(_THOUGHT.encode()).hexdigest(),
}
REFUSAL = {"type": "refusal", "refusal": "I cannot help with that."}
IMAGE = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}


def estimate(message: Message) -> int:
    return estimate_message(message, get_tokenizer("cl100k_base"))


def test_thinking_and_refusal_parts_cost_their_text_not_a_media_item():
    media = DEFAULT_ESTIMATE_CONFIG.media_item_tokens
    thinking = Message(role="assistant", content=[THINKING, {"type": "text", "text": "Done."}])
    plain = Message(role="assistant", content=[{"type": "text", "text": "Done."}])
    assert thinking.media_count == 0
    assert estimate(plain) < estimate(thinking) < estimate(plain) + media
    assert estimate(thinking) - estimate(plain) > 100  # the thinking text is counted
    refusal = Message(role="assistant", content=[REFUSAL])
    assert refusal.media_count == 0 and estimate(refusal) < media
    image = Message(role="user", content=[IMAGE])
    assert image.media_count == 1 and estimate(image) >= media  # a real media item still is


def _bodies(messages: list[Message]) -> tuple[dict, dict]:
    parts = ContextParts(model="m", max_output_tokens=100, messages=messages)
    anthropic, openai = build_request("anthropic", parts), build_request("openai", parts)
    validate(anthropic)
    validate_chat(openai)
    return anthropic, openai


def test_a_build_passes_only_the_parts_its_provider_takes():
    history = [
        Message(role="user", content=[{"type": "text", "text": "Look:"}, IMAGE]),
        Message(role="assistant", content=[THINKING, {"type": "text", "text": "A cat."}]),
        Message(role="user", content="Now this?"),
        Message(role="assistant", content=[REFUSAL]),
        Message(role="user", content="ok"),
    ]
    anthropic, openai = _bodies(history)
    # Anthropic: its thinking block and image as they are; the refusal is the text said.
    blocks = [b["type"] for m in anthropic["messages"] for b in m["content"]]
    assert blocks == ["text", "image", "thinking", "text", "text", "text", "text"]
    assert anthropic["messages"][3]["content"] == [{"type": "text", "text": REFUSAL["refusal"]}]
    # OpenAI: no thinking; the image as image_url; the refusal kept on the assistant message.
    sent = openai["messages"]
    assert "thinking" not in str(sent)
    assert sent[0]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "https://example.com/a.png"},
    }
    assert sent[1]["content"] == [{"type": "text", "text": "A cat."}]
    assert sent[3]["content"] == [REFUSAL]
