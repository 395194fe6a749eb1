"""The provider APIs' registry: each named once, each found by its routes' path."""

from __future__ import annotations

import pytest

from proxy.providers import (
    ANTHROPIC,
    GEMINI,
    OPENAI,
    RESPONSES,
    all_registered,
    registered,
    serving,
)


def test_each_provider_api_is_registered_under_its_name():
    assert set(all_registered()) == {ANTHROPIC, GEMINI, OPENAI, RESPONSES}
    # Responses shares OpenAI's prefix: the first registered of the two answers for it
    assert all_registered().index(OPENAI) < all_registered().index(RESPONSES)
    for dialect in all_registered():
        assert registered(dialect.name) is dialect
    with pytest.raises(KeyError):
        registered("vertex")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/proxy/anthropic/v1/messages", ANTHROPIC),
        ("/proxy/openai/v1/chat/completions", OPENAI),
        # Responses shares the prefix and the error shape: the first registered answers.
        ("/proxy/openai/v1/nowhere", OPENAI),
        ("/proxy/gemini/v1beta/models/x:generateContent", GEMINI),
        ("/proxy/elsewhere", ANTHROPIC),
    ],
)
def test_a_path_names_the_provider_api_that_answers_for_it(path, expected):
    assert serving(path, ANTHROPIC) is expected


def test_the_openai_apis_share_their_error_shape():
    assert OPENAI.error_body(404, "x") == RESPONSES.error_body(404, "x")
    assert OPENAI.error_body(400, "x", "context_length_exceeded")["error"]["code"] == (
        "context_length_exceeded"
    )
