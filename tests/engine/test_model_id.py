"""Model ids with a provider prefix (docs/concepts/context-build.md#limit-resolution: the model's
own row)."""

from __future__ import annotations

import pytest

from contextsvc.engine.budget import split_model_id


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("anthropic/claude-sonnet-4-5", ("anthropic", "claude-sonnet-4-5")),
        ("openai/gpt-4o-mini", ("openai", "gpt-4o-mini")),
        ("OpenAI/gpt-4o", ("openai", "gpt-4o")),
        ("openrouter/anthropic/claude-opus-4-1", ("anthropic", "claude-opus-4-1")),
        ("gemini/gemini-2.5-pro", ("google", "gemini-2.5-pro")),
        ("claude-sonnet-4-5", ("", "claude-sonnet-4-5")),
        # A slash that is no provider prefix is part of a local model's name.
        ("meta-llama/Llama-3.1-8B", ("", "meta-llama/Llama-3.1-8B")),
    ],
)
def test_spec001_resolution_model_id_provider_prefix_split(model, expected):
    assert split_model_id(model) == expected
