"""Covering indexes for the inspector's figures over a whole session.

``contextcall_session_cover`` (session, id) carries what the cost totals, the
usage chart's largest build per bar and the trend read, so those are
index-only scans rather than reads of the wide rows (breakdown JSON); it
replaces ``contextcall_session_idx`` (session, -id), which it serves as well
(scanned backwards). SQLite creates it without the included columns.

On PostgreSQL the (session, seq) unique constraint of messages also carries
role, token count, view state and retraction: the chart's pass over every
message, the tool-output sum and the turn count read the index, not the
rows' text, and appends maintain no second index. The model keeps the plain
constraint (Django would drop a covering unique constraint on SQLite).
"""

from django.db import migrations, models

TABLE = "agent_sessions_message"
CONSTRAINT = "uniq_message_session_seq"
COVERING = "UNIQUE (session_id, seq) INCLUDE (role, token_count, view_state, retracted_at)"
PLAIN = "UNIQUE (session_id, seq)"


def _swap(schema_editor, definition: str) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"ALTER TABLE {TABLE} DROP CONSTRAINT {CONSTRAINT}, "
            f"ADD CONSTRAINT {CONSTRAINT} {definition}"
        )


def cover(apps, schema_editor):
    _swap(schema_editor, COVERING)


def uncover(apps, schema_editor):
    _swap(schema_editor, PLAIN)


class Migration(migrations.Migration):
    dependencies = [("agent_sessions", "0012_contextcall")]

    operations = [
        migrations.RemoveIndex(model_name="contextcall", name="contextcall_session_idx"),
        migrations.AddIndex(
            model_name="contextcall",
            index=models.Index(
                fields=["session", "id"],
                include=(
                    "through_seq",
                    "estimated_input",
                    "completed_at",
                    "cost_usd",
                    "cost_without_cache_usd",
                ),
                name="contextcall_session_cover",
            ),
        ),
        migrations.RunPython(cover, uncover),
    ]
