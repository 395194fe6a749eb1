"""Full-text search of the transcript (the inspector's finder) on PostgreSQL: a GIN index.

The expression must stay the text of ``sessions.dashboard.selectors.finder.FTS_DOCUMENT``
for the planner to use it. ``simple`` (no stemming, no stop words): transcripts are
code, paths and logs as much as English. ``left(…, 100000)``: a tsvector holds at
most 1 MB, so an unbounded message could make its own insert fail. SQLite has no
such index; the finder falls back to a substring match there.
"""

from django.db import migrations

INDEX = "message_content_fts_idx"
CREATE = (
    f"CREATE INDEX IF NOT EXISTS {INDEX} ON agent_sessions_message "
    "USING gin (to_tsvector('simple'::regconfig, left(content, 100000)))"
)
DROP = f"DROP INDEX IF EXISTS {INDEX}"


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("agent_sessions", "0009_policy_change")]

    operations = [migrations.RunPython(create, drop)]
