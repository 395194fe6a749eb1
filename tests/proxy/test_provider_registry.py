"""The provider APIs' registry: each named once, each found by its routes' path."""

from __future__ import annotations

import pytest

from proxy.providers import ANTHROPIC, OPENAI, RESPONSES, all_registered, registered, serving


def test_each_provider_api_is_registered_under_its_name():
    assert all_registered() == (ANTHROPIC, OPENAI, RESPONSES)
    for dialect in all_registered():
        assert registered(dialect.name) is dialect
    with pytest.raises(KeyError):
        registered("gemini")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/proxy/anthropic/v1/messages", ANTHROPIC),
        ("/proxy/openai/v1/chat/completions", OPENAI),
        # Responses shares the prefix and the error shape: the first registered answers.
        ("/proxy/openai/v1/nowhere", OPENAI),
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
