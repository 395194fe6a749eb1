"""The test suite's PostgreSQL backend (tests/postgresql/): its flush empties
every table but the content types and permissions, whatever the foreign keys
between them, in one statement of DELETEs."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.core.management.color import no_style
from django.db import connection

from tests.postgresql.base import KEPT

pytestmark = [pytest.mark.needs_postgres, pytest.mark.django_db(transaction=True)]


def _rows() -> dict[str, int]:
    return {
        model._meta.db_table: model._base_manager.count()
        for model in apps.get_models(include_auto_created=True)
    }


def test_the_flush_deletes_rows_of_tables_that_reference_each_other(alice, make_session):
    session = make_session()
    sid = session["id"]
    response = alice.post(
        f"sessions/{sid}/messages",
        {"messages": [{"role": "user", "content": "the flush takes this"}]},
    )
    assert response.status_code == 200, response.content
    kept = (list(ContentType.objects.values_list("pk", flat=True)), Permission.objects.count())
    before = _rows()
    assert before["agent_sessions_session"] >= 1 and before["agent_sessions_message"] >= 1

    statements = connection.ops.sql_flush(no_style(), connection.introspection.django_table_names())
    assert len(statements) == 1 and "TRUNCATE" not in statements[0]

    call_command(
        "flush", verbosity=0, interactive=False, reset_sequences=False, inhibit_post_migrate=True
    )

    after = _rows()
    assert {table: n for table, n in after.items() if n and table not in KEPT} == {}
    assert (
        list(ContentType.objects.values_list("pk", flat=True)),
        Permission.objects.count(),
    ) == kept


def test_a_flush_that_resets_sequences_is_django_s_truncate():
    statements = connection.ops.sql_flush(
        no_style(), ["agent_sessions_session"], reset_sequences=True
    )
    assert statements[0].startswith("TRUNCATE")
