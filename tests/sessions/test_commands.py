"""Management commands: keys and the quick-start demo."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import OperationalError

from sessions.management.commands import serve_demo
from sessions.models import AgentKey, Session, hash_key
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db


def test_create_agent_key_prints_the_key_alone_on_the_last_line():
    out, err = StringIO(), StringIO()
    call_command("create_agent_key", "ci-bot", stdout=out, stderr=err)
    raw = out.getvalue().strip().splitlines()[-1]
    assert raw.startswith("cx_") and " " not in raw
    key = AgentKey.objects.get(name="ci-bot")
    assert key.key_hash == hash_key(raw)
    assert raw not in {key.key_hash, key.prefix}  # never stored in clear
    assert ApiClient(raw).get("sessions").status_code == 200


def test_revoke_agent_key_by_id():
    out = StringIO()
    call_command("create_agent_key", "temp", stdout=out, stderr=StringIO())
    raw = out.getvalue().strip().splitlines()[-1]
    key = AgentKey.objects.get(name="temp")
    call_command("revoke_agent_key", str(key.pk), stdout=StringIO())
    assert ApiClient(raw).get("sessions").status_code == 401
    with pytest.raises(CommandError):
        call_command("revoke_agent_key", "999999", stdout=StringIO())


def test_seed_demo_is_idempotent_and_prints_a_working_key(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    first, second = StringIO(), StringIO()
    call_command("seed_demo", stdout=first)
    call_command("seed_demo", stdout=second)
    key_line = [line for line in first.getvalue().splitlines() if "agent key" in line][0]
    raw = key_line.split()[-1]
    assert raw in second.getvalue()  # same key reused, not a new one per run
    assert Session.objects.filter(external_id="demo").count() == 1
    body = ApiClient(raw).get("sessions/demo/context", format="anthropic").json()
    assert body["messages"][0]["role"] == "user"
    assert body["budget"]["components"]["conversation"] > 0


def test_openapi_schema_lists_the_contract_paths(client):
    paths = client.get("/api/v1/openapi.json").json()["paths"]
    for path in (
        "/api/v1/sessions",
        "/api/v1/sessions/{sid}/messages",
        "/api/v1/sessions/{sid}/context",
        "/api/v1/sessions/{sid}/budget",
        "/api/v1/sessions/{sid}/usage",
    ):
        assert path in paths
    assert client.get("/api/v1/docs").status_code == 200


def test_prune_idempotency_keys_deletes_only_expired_records(alice, make_session, settings):
    from datetime import timedelta

    from django.utils import timezone

    from sessions.models import IdempotencyRecord

    sid = make_session(id="prune")["id"]
    for key in ("old", "new"):
        alice.post(
            f"sessions/{sid}/messages",
            {"messages": [{"role": "user", "content": key}]},
            headers={"Idempotency-Key": key},
        )
    IdempotencyRecord.objects.filter(key="old").update(
        created_at=timezone.now() - timedelta(hours=25)
    )
    settings.CONTEXTSVC_IDEMPOTENCY_TTL_HOURS = 24
    out = StringIO()
    call_command("prune_idempotency_keys", stdout=out)
    assert "Deleted 1" in out.getvalue()
    assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == ["new"]


def test_beat_schedule_names_registered_tasks():
    from django.conf import settings

    from contextsvc.celery import app

    app.loader.import_default_modules()
    for entry in settings.CELERY_BEAT_SCHEDULE.values():
        assert entry["task"] in app.tasks, entry["task"]


def test_seed_demo_migrates_first_when_asked(settings, tmp_path):
    """bin/run's one Python start for both steps: ``seed_demo --migrate``."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    settings.VAR_DIR = tmp_path
    out = StringIO()
    call_command("seed_demo", "--migrate", stdout=out)
    executor = MigrationExecutor(connection)
    assert executor.migration_plan(executor.loader.graph.leaf_nodes()) == []
    assert "cx_" in out.getvalue()


def test_serve_demo_makes_the_demo_before_it_binds_and_ends_with_the_banner(
    settings, tmp_path, monkeypatch
):
    """bin/run's web server: the demo is in place before the socket opens, and the
    agent key, the operator login and the ready curl are its last lines."""
    settings.VAR_DIR = tmp_path
    monkeypatch.setenv("HOST", "127.0.0.1")
    monkeypatch.setenv("PORT", "8123")
    out = StringIO()
    command = serve_demo.Command(stdout=out)
    command.migrated = True
    command.check_migrations()
    assert Session.objects.filter(external_id="demo").exists()
    assert out.getvalue() == ""  # nothing to migrate, nothing said
    command.on_bind(8123)
    key = (tmp_path / "demo_key.txt").read_text().strip()
    lines = out.getvalue().splitlines()
    assert lines[-3] == f"  agent key   {key}"
    assert "login: operator / contextsvc-demo" in lines[-2]
    assert lines[-1] == (
        f"  try         curl -H 'Authorization: Bearer {key}' "
        "'http://127.0.0.1:8123/api/v1/sessions/demo/context?format=anthropic'"
    )
    body = ApiClient(key).get("sessions/demo/context", format="anthropic").json()
    assert body["messages"]


def test_serve_demo_migrates_after_all_when_the_tables_are_missing(monkeypatch):
    """--migrated skips the plan; a database replaced since the last start is migrated."""
    calls = []
    outcomes = [OperationalError("no such table: auth_user"), "demo"]

    def seed():
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(serve_demo, "demo_seed", seed)
    monkeypatch.setattr(serve_demo.Command, "migrate", lambda self: calls.append("migrate"))
    command = serve_demo.Command(stdout=StringIO())
    command.migrated = True
    command.check_migrations()
    assert calls == ["migrate"] and command.demo == "demo"
    command.migrated = False
    outcomes[:] = [OperationalError("locked")]
    with pytest.raises(OperationalError):
        command.check_migrations()  # without --migrated the plan ran: a real error
    assert calls == ["migrate", "migrate"]
