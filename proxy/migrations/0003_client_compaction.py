"""ClientCompaction: where a client replaced its own history (the divergence rule), for the dashboard."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agent_sessions", "0006_session_parent"),
        ("proxy", "0002_client_view_chain"),
    ]

    operations = [
        migrations.CreateModel(
            name="ClientCompaction",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("marker_seq", models.PositiveIntegerField()),
                ("start_seq", models.PositiveIntegerField()),
                ("client_messages", models.PositiveIntegerField(default=0)),
                ("window_tokens", models.PositiveIntegerField(blank=True, null=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "session",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="client_compactions",
                        to="agent_sessions.session",
                    ),
                ),
            ],
            options={
                "ordering": ["session", "id"],
            },
        ),
    ]
