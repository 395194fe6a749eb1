"""The published request schemas state the rules the service enforces.

Bodies generated from /api/v1/openapi.json alone (schemathesis's generator,
derandomized: the same bodies every run) for PATCH /sessions/{sid}, POST
/messages/retract and POST /tools/preview are refused only by rules no JSON
Schema can state: one field against another (the effective window, the two
thresholds) or against the session's state (more messages than it holds), or NUL in a text, refused everywhere.
Before the schemas said so, most were 422s for "exactly one of" and bounds.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextsvc.engine.tokens import parse_tokenizer_spec
from sessions.schemas_base import TOKENIZER_PATTERN

pytestmark = pytest.mark.django_db

EXAMPLES = 120
# The rules left to code: their messages' openings.
CROSS_FIELD_OR_STATE = {
    ("/api/v1/sessions/{sid}", "PATCH"): (
        "Effective context limit must be positive",
        "policy.thresholds: Value error, thresholds.compact_at must be below",
    ),
    ("/api/v1/sessions/{sid}/messages/retract", "POST"): ("last is ", "from_seq "),
    ("/api/v1/sessions/{sid}/tools/preview", "POST"): (),
}


def _generated_bodies(raw_schema: dict, path: str, method: str) -> list:
    operation = schemathesis.openapi.from_dict(raw_schema)[path][method]
    bodies: list = []

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(operation.as_strategy())
    def collect(case) -> None:
        bodies.append(case.body)

    collect()
    return bodies


@pytest.mark.parametrize(("path", "method"), list(CROSS_FIELD_OR_STATE))
def test_schema_valid_bodies_are_refused_only_for_cross_field_or_state_rules(
    alice, make_session, path, method
):
    sid = make_session(id="contract")["id"]
    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}] * 3
    assert alice.post(f"sessions/{sid}/messages", {"messages": turns}).status_code == 200
    bodies = _generated_bodies(alice.get("openapi.json").json(), path, method)
    assert len(bodies) >= EXAMPLES // 2
    url = path.removeprefix("/api/v1/").replace("{sid}", sid)
    send = alice.patch if method == "PATCH" else alice.post
    refused = []
    for body in bodies:
        response = send(url, body)
        assert response.status_code != 500, body
        if response.status_code == 422:
            error = response.json()["error"]
            # NUL in any text is refused service-wide (PostgreSQL cannot store it).
            nul = isinstance(error["details"], dict) and error["details"].get("reason") == "nul"
            if not nul and not error["message"].startswith(CROSS_FIELD_OR_STATE[(path, method)]):
                refused.append((body, error))
    assert refused == [], refused[:5]


@settings(max_examples=300, derandomize=True, database=None)
@given(st.from_regex(TOKENIZER_PATTERN, fullmatch=True))
def test_every_tokenizer_the_schema_documents_is_accepted(spec):
    parse_tokenizer_spec(spec)  # raises EngineValidationError for an unknown one


def test_the_documented_bounds_keep_the_engines_messages_naming_the_field(alice, make_session):
    sid = make_session(id="bounds")["id"]
    for field, value, message in (
        ("context_window", 0, "Context limit must be positive"),
        ("max_output_tokens", -1, "max_output_tokens must not be negative, got -1"),
        ("buffer_tokens", -1, "buffer_tokens must not be negative, got -1"),
    ):
        response = alice.patch(f"sessions/{sid}", {field: value})
        assert response.status_code == 422
        error = response.json()["error"]
        assert error["message"] == message and error["details"]["field"] == field


def test_a_preview_of_two_sizes_or_none_names_the_field(alice, make_session):
    sid = make_session(id="sizes")["id"]
    both = alice.post(f"sessions/{sid}/tools/preview", {"bytes": 10, "tokens": 3})
    none = alice.post(f"sessions/{sid}/tools/preview", {"tool_call_id": "c1"})
    for response, field in ((both, "tokens"), (none, "bytes")):
        assert response.status_code == 422
        error = response.json()["error"]
        assert error["message"] == "Give exactly one of bytes, tokens or text"
        assert error["details"]["field"] == field
