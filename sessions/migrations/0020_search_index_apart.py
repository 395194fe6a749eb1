"""The transcript's full-text index leaves the message table; a redundant index goes.

``message_content_fts_idx`` (0010) made every append work out the tsvector of
each new message. The words now live in ``agent_sessions_messagesearch``,
filled when a session is first searched (``sessions.services.search_index``),
GIN-indexed on PostgreSQL. The FK index on ``message.session_id`` duplicated
the unique (session_id, seq) index, which leads with the same column.
"""

import django.contrib.postgres.search
import django.db.models.deletion
from django.db import migrations, models

GIN = "message_search_document_idx"
OLD = "message_content_fts_idx"


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {OLD}")
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {GIN} ON agent_sessions_messagesearch USING gin (document)"
        )


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {GIN}")
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {OLD} ON agent_sessions_message "
            "USING gin (to_tsvector('simple'::regconfig, left(content, 100000)))"
        )


class Migration(migrations.Migration):
    dependencies = [("agent_sessions", "0019_call_outcome_session_origin")]

    operations = [
        migrations.AlterField(
            model_name="message",
            name="session",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="messages",
                to="agent_sessions.session",
            ),
        ),
        migrations.CreateModel(
            name="MessageSearch",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("seq", models.PositiveIntegerField()),
                ("document", django.contrib.postgres.search.SearchVectorField()),
                (
                    "session",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="agent_sessions.session",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("session", "seq"), name="uniq_message_search_seq"
                    )
                ],
            },
        ),
        migrations.RunPython(forward, backward),
    ]
