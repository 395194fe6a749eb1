"""Shared fixtures: personas alice and bob (agent keys), an API client that
speaks JSON with a bearer key, and session factories."""

from __future__ import annotations

import importlib
import json
from typing import Any

import pytest
from django.apps import apps
from django.db.models.signals import post_migrate
from django.test import Client

from tests import alone, parts
from tests.parts import IN_CI


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Skip what this machine cannot run (tests/parts.py); slow tests first, so
    xdist's workers are not left waiting on one of them at the end."""
    parts.apply(items)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_runtest_setup(item):
    parts.refuse_in_ci(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """An ``alone`` test runs while the other xdist workers wait (tests/alone.py)."""
    with alone.held(exclusive=item.get_closest_marker("alone") is not None):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """In CI nothing may skip: a skip left (a ``pytest.skip`` in a test) is a failure."""
    report = (yield).get_result()
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where nothing may skip: {parts.skip_reason(report)}"


def pytest_terminal_summary(terminalreporter):
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if not hasattr(r, "wasxfail")]
    lines = parts.summary_lines(skipped)
    if lines:
        terminalreporter.section("skipped, and how to run them")
        for line in lines:
            terminalreporter.write_line(line)


class ApiClient:
    """Thin JSON client over Django's test client, bound to one agent key."""

    def __init__(self, raw_key: str | None) -> None:
        self.client = Client()
        self.raw_key = raw_key

    def _headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        headers = {}
        if self.raw_key:
            headers["Authorization"] = f"Bearer {self.raw_key}"
        headers.update(extra or {})
        return headers

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | str | None = None,
        headers: dict[str, str] | None = None,
        **query: Any,
    ):
        url = path if path.startswith("/") else f"/api/v1/{path}"
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        fn = getattr(self.client, method.lower())
        kwargs: dict[str, Any] = {"headers": self._headers(headers)}
        if method.upper() in ("GET", "DELETE"):
            return fn(url, query or None, **kwargs)
        return fn(url, data=data, content_type="application/json", **kwargs)

    def get(self, path: str, **query: Any):
        return self.request("GET", path, **query)

    def post(self, path: str, body: Any = None, **kw: Any):
        return self.request("POST", path, body, **kw)

    def put(self, path: str, body: Any = None, **kw: Any):
        return self.request("PUT", path, body, **kw)

    def patch(self, path: str, body: Any = None, **kw: Any):
        return self.request("PATCH", path, body, **kw)


@pytest.fixture
def make_key(db):
    from sessions.services.keys import agent_key_create

    def _make(name: str = "agent"):
        return agent_key_create(name=name)

    return _make


@pytest.fixture
def alice_key(make_key):
    return make_key("alice")


@pytest.fixture
def bob_key(make_key):
    return make_key("bob")


@pytest.fixture
def alice(alice_key) -> ApiClient:
    """The owner persona."""
    return ApiClient(alice_key[1])


@pytest.fixture
def bob(bob_key) -> ApiClient:
    """Another agent key: must never see alice's sessions."""
    return ApiClient(bob_key[1])


@pytest.fixture
def anon(db) -> ApiClient:
    return ApiClient(None)


@pytest.fixture
def make_session(alice):
    """Create a session through the API; returns its JSON."""

    def _make(client: ApiClient | None = None, **fields: Any) -> dict:
        body = {
            "model": "claude-sonnet-4-5",
            "context_window": 32_000,
            "max_output_tokens": 4_096,
            "buffer_tokens": 2_048,
            **fields,
        }
        response = (client or alice).post("sessions", body)
        assert response.status_code == 201, response.content
        return response.json()

    return _make


def tool_turn(call_id: str, output: str, *, name: str = "bash", command: str = "ls") -> list[dict]:
    """An assistant tool call and its result, as an agent posts them."""
    return [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": call_id, "name": name, "arguments": {"command": command}}],
        },
        {"role": "tool", "tool_call_id": call_id, "content": output},
    ]


# The seeded model profiles' rows, read once per process after the migrations'
# own seeding has run: put back by one insert, not by the migrations' hundred
# update_or_create queries (a fifth of a second before and after every
# transactional test).
_SEEDED_PROFILES: list[dict[str, Any]] = []


def _seed_model_profiles(**kwargs: Any) -> None:
    """The model profiles the migrations seed, seeded again: limits and prices
    come from them, and a transactional test's flush empties them."""
    profiles = apps.get_model("agent_sessions", "ModelProfile").objects
    if not _SEEDED_PROFILES:
        for name in (
            "0002_seed_model_profiles",
            "0011_seed_claude_sonnet_4_6",
            "0022_seed_gemini_profiles",
        ):
            importlib.import_module(f"sessions.migrations.{name}").seed(apps, None)
        # 0002's rows default to taking mid-conversation system messages; 0005 marks the older.
        importlib.import_module(
            "sessions.migrations.0005_model_profile_mid_system_messages"
        ).mark_older(apps, None)
        _SEEDED_PROFILES.extend(profiles.order_by("pk").values())
    elif profiles.count() != len(_SEEDED_PROFILES):
        # Emptied by a flush (a test's own changes go with it: the flush follows them).
        profiles.all().delete()
        profiles.bulk_create([profiles.model(**row) for row in _SEEDED_PROFILES])


def _reseed_after_flush(sender: Any, using: str = "default", **kwargs: Any) -> None:
    # A transactional test ends with a flush, and the flush sends post_migrate
    # (as Django recreates content types after it). Under xdist a worker may be
    # handed ordinary tests after a transactional one: they would find no
    # profiles, so no prices (cost None) and fallback limits.
    if sender.name == "sessions":
        _seed_model_profiles()


post_migrate.connect(_reseed_after_flush, dispatch_uid="tests.reseed_model_profiles")


@pytest.fixture
def model_profiles(transactional_db):
    _seed_model_profiles()
