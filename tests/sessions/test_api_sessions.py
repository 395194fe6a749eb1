"""POST/GET/PATCH /sessions: creation, limit resolution, personas, bad input."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_create_session_resolves_limits_from_model_profile_spec001(alice):
    response = alice.post("sessions", {"model": "claude-sonnet-4-5-20250929"})
    assert response.status_code == 201
    body = response.json()
    # model profile (dated id matches its family) > provider > defaults
    assert body["provider"] == "anthropic"
    assert body["context_window"] == 200_000
    assert body["max_output_tokens"] == 64_000
    assert body["buffer_tokens"] == 8_192  # docs/concepts/context-build.md#limit-resolution
    assert body["budget"]["effective_window"] == 200_000 - 64_000 - 8_192


def test_unknown_model_gets_spec001_defaults(alice):
    body = alice.post("sessions", {"model": "local-llama", "provider": "ollama"}).json()
    assert body["context_window"] == 131_072
    assert body["max_output_tokens"] == 131_072 // 4
    assert body["buffer_tokens"] == 8_192


def test_window_defaults_to_four_times_max_tokens_spec003(alice):
    body = alice.post(
        "sessions", {"model": "local-llama", "provider": "ollama", "max_output_tokens": 8_000}
    ).json()
    assert body["context_window"] == 32_000


def test_explicit_limits_beat_profile_spec001(alice):
    body = alice.post(
        "sessions",
        {
            "model": "gpt-4o",
            "context_window": 50_000,
            "max_output_tokens": 1_000,
            "buffer_tokens": 0,
        },
    ).json()
    assert (body["context_window"], body["max_output_tokens"], body["buffer_tokens"]) == (
        50_000,
        1_000,
        0,
    )
    assert body["budget"]["effective_window"] == 49_000


def test_cx_nt1_zero_context_window_is_validation_error(alice):
    response = alice.post("sessions", {"model": "gpt-4o", "context_window": 0})
    assert response.status_code == 422
    assert response.json()["error"] == {
        "code": "VALIDATION_ERROR",
        "message": "Context limit must be positive",
        "details": {"field": "context_window"},
    }


def test_duplicate_session_id_is_conflict(alice):
    assert alice.post("sessions", {"model": "gpt-4o", "id": "run-1"}).status_code == 201
    response = alice.post("sessions", {"model": "gpt-4o", "id": "run-1"})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "CONFLICT"


def test_same_id_under_another_key_is_a_different_session(alice, bob):
    assert alice.post("sessions", {"model": "gpt-4o", "id": "shared-name"}).status_code == 201
    assert bob.post("sessions", {"model": "gpt-4o", "id": "shared-name"}).status_code == 201


def test_stranger_gets_404_for_every_session_path(alice, bob, make_session):
    sid = make_session(id="alice-only")["id"]
    for path in ("", "/budget", "/context"):
        response = bob.get(f"sessions/{sid}{path}")
        assert response.status_code == 404, path
        assert response.json()["error"]["code"] == "NOT_FOUND"
    response = bob.post(
        f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "hi"}]}
    )
    assert response.status_code == 404
    assert alice.get(f"sessions/{sid}").status_code == 200


def test_missing_or_wrong_key_is_401(anon, alice):
    assert anon.get("sessions").status_code == 401
    response = anon.get("sessions")
    assert response.json()["error"]["code"] == "UNAUTHORIZED"
    from tests.conftest import ApiClient

    assert ApiClient("cx_not-a-key").get("sessions").status_code == 401


def test_revoked_key_is_401(alice_key, alice):
    from sessions.services.keys import agent_key_revoke

    assert alice.get("sessions").status_code == 200
    agent_key_revoke(key=alice_key[0])
    assert alice.get("sessions").status_code == 401


def test_unknown_field_is_422_naming_it(alice):
    response = alice.post("sessions", {"model": "gpt-4o", "contxt_window": 10})
    assert response.status_code == 422
    assert "contxt_window" in response.json()["error"]["message"]


def test_unknown_tokenizer_is_422(alice):
    response = alice.post("sessions", {"model": "gpt-4o", "tokenizer": "sentencepiece:foo"})
    assert response.status_code == 422


def test_thresholds_must_be_ordered(alice):
    response = alice.post(
        "sessions",
        {"model": "gpt-4o", "policy": {"thresholds": {"compact_at": 0.9, "block_at": 0.8}}},
    )
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "VALIDATION_ERROR"


def test_list_is_scoped_filtered_and_paginated(alice, bob, make_session):
    for i in range(5):
        make_session(id=f"s{i}", agent="coder" if i % 2 else "planner")
    make_session(client=bob, id="bob-1")
    listed = alice.get("sessions").json()
    assert {s["id"] for s in listed["items"]} == {f"s{i}" for i in range(5)}
    coders = alice.get("sessions", agent="coder").json()["items"]
    assert {s["id"] for s in coders} == {"s1", "s3"}
    first = alice.get("sessions", limit=2).json()
    assert len(first["items"]) == 2 and first["next_cursor"]
    second = alice.get("sessions", limit=2, cursor=first["next_cursor"]).json()
    assert not {s["id"] for s in first["items"]} & {s["id"] for s in second["items"]}


def test_patch_changes_limits_and_policy(alice, make_session):
    sid = make_session(id="p")["id"]
    response = alice.patch(
        f"sessions/{sid}",
        {"context_window": 64_000, "policy": {"thresholds": {"compact_at": 0.8, "block_at": 0.9}}},
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["context_window"] == 64_000
    effective = 64_000 - 4_096 - 2_048
    assert body["budget"]["thresholds"]["compact_at"] == int(effective * 0.8)
    assert body["budget"]["effective_window"] == effective


def test_put_system_and_tools_count_components(alice, make_session):
    sid = make_session(id="c")["id"]
    response = alice.put(
        f"sessions/{sid}/system",
        [
            {"name": "base", "content": "You are helpful. " * 50, "kind": "base"},
            {"name": "pdf-skill", "content": "When reading PDFs, " * 30, "kind": "skill"},
        ],
    )
    assert response.status_code == 200, response.content
    components = response.json()["budget"]["components"]
    assert components["system_prompt"] > 0 and components["skill_prompts"] > 0
    assert components["system_prompt"] > components["skill_prompts"]
    tool = {
        "name": "grep",
        "description": "Search files",
        "input_schema": {"type": "object", "properties": {"pattern": {"type": "string"}}},
    }
    response = alice.put(f"sessions/{sid}/tools", [tool])
    assert response.status_code == 200
    tool_tokens = response.json()["budget"]["components"]["tool_descriptions"]
    assert tool_tokens > 0
    # Two copies (different names) cost about twice as much: counted per tool, scaled.
    response = alice.put(f"sessions/{sid}/tools", [tool, {**tool, "name": "grep2"}])
    assert response.json()["budget"]["components"]["tool_descriptions"] >= 2 * tool_tokens - 1


def test_duplicate_tool_names_rejected_and_nothing_applied(alice, make_session):
    sid = make_session(id="d")["id"]
    tool = {"name": "grep", "description": "x", "input_schema": {"type": "object"}}
    response = alice.put(f"sessions/{sid}/tools", [tool, tool])
    assert response.status_code == 422
    assert "grep" in response.json()["error"]["message"]
    assert alice.get(f"sessions/{sid}/budget").json()["components"]["tool_descriptions"] == 0


def test_unknown_section_kind_is_422(alice, make_session):
    sid = make_session(id="k")["id"]
    response = alice.put(
        f"sessions/{sid}/system", [{"name": "x", "content": "y", "kind": "secret"}]
    )
    assert response.status_code == 422


@pytest.mark.parametrize(
    ("model", "window", "output"),  # seeded by sessions/migrations/0022
    [
        ("gemini-2.5-flash-lite", 1_048_576, 65_536),
        ("gemini-3.1-pro-preview", 1_048_576, 65_536),  # the "gemini-3" row, by prefix
        ("gemini-next", 1_048_576, 65_536),  # Google's default row
        ("gemini-pro", 32_000, 8_192),  # Gemini 1.0 Pro keeps its own
    ],
)
def test_gemini_models_get_their_windows(alice, model, window, output):
    body = alice.post("sessions", {"model": model, "provider": "google"}).json()
    assert (body["context_window"], body["max_output_tokens"]) == (window, output)
