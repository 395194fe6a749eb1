"""A model id with a provider prefix resolves to that model's limits
(docs/concepts/context-build.md#limit-resolution)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_spec001_resolution_anthropic_prefixed_model_gets_its_profile(alice):
    bare = alice.post("sessions", {"model": "claude-sonnet-4-5-20250929"}).json()
    body = alice.post("sessions", {"model": "anthropic/claude-sonnet-4-5-20250929"}).json()
    assert body["provider"] == "anthropic"
    assert body["model"] == "anthropic/claude-sonnet-4-5-20250929"  # sent on as given
    assert (body["context_window"], body["max_output_tokens"]) == (
        bare["context_window"],
        bare["max_output_tokens"],
    )
    assert body["context_window"] == 200_000  # not the 131,072 default


def test_spec001_resolution_openai_prefixed_model_gets_its_profile(alice):
    bare = alice.post("sessions", {"model": "gpt-4o"}).json()
    body = alice.post("sessions", {"model": "openai/gpt-4o"}).json()
    assert body["provider"] == "openai"
    assert body["context_window"] == bare["context_window"] != 131_072


def test_spec001_resolution_prefixed_fallback_target(alice):
    body = alice.post(
        "sessions",
        {
            "model": "claude-sonnet-4-5",
            "policy": {"targets": [{"provider": "openai", "model": "openai/gpt-4o"}]},
        },
    ).json()
    bare = alice.post("sessions", {"model": "gpt-4o"}).json()
    (target,) = body["policy"]["targets"]
    assert target["context_window"] == bare["context_window"] != 131_072


def test_spec001_resolution_prefixed_model_min_cacheable_from_profile(alice):
    # The prompt-cache profile (minimum cacheable prefix) resolves the same way.
    alice.post("sessions", {"id": "pfx-cache", "model": "anthropic/claude-haiku-4-5"})
    budget = alice.get("sessions/pfx-cache/context", format="anthropic").json()["budget"]
    assert budget["cache"]["min_cacheable_tokens"] == 4096
