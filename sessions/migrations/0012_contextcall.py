"""ContextCall: one row per context build (what was sent, as sent), completed by usage;
Message.trim_info: why and when a view became a placeholder."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agent_sessions", "0011_seed_claude_sonnet_4_6"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="trim_info",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.CreateModel(
            name="ContextCall",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "source",
                    models.CharField(
                        choices=[("api", "Api"), ("proxy", "Proxy")], default="api", max_length=8
                    ),
                ),
                ("format", models.CharField(max_length=16)),
                ("model", models.CharField(max_length=200)),
                ("first_seq", models.PositiveIntegerField(default=0)),
                ("through_seq", models.PositiveIntegerField(default=0)),
                ("message_count", models.PositiveIntegerField(default=0)),
                ("guard_status", models.CharField(max_length=10)),
                ("effective_window", models.PositiveIntegerField(default=0)),
                ("compact_at", models.PositiveIntegerField(default=0)),
                ("estimated_input", models.PositiveIntegerField(default=0)),
                ("components", models.JSONField(default=dict)),
                ("breakdown", models.JSONField(default=dict)),
                ("breakpoints", models.JSONField(default=list)),
                ("cache_read_estimated", models.PositiveIntegerField(default=0)),
                ("cache_write_estimated", models.PositiveIntegerField(default=0)),
                ("prices", models.JSONField(blank=True, null=True)),
                ("build_ms", models.FloatField(default=0.0)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("completed_at", models.DateTimeField(blank=True, null=True)),
                ("reported_input", models.PositiveIntegerField(blank=True, null=True)),
                ("reported_output", models.PositiveIntegerField(blank=True, null=True)),
                ("cache_read", models.PositiveIntegerField(blank=True, null=True)),
                ("cache_write", models.PositiveIntegerField(blank=True, null=True)),
                ("cost_usd", models.FloatField(blank=True, null=True)),
                ("cost_without_cache_usd", models.FloatField(blank=True, null=True)),
                (
                    "session",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="calls",
                        to="agent_sessions.session",
                    ),
                ),
            ],
            options={
                "ordering": ["session", "id"],
                "indexes": [
                    models.Index(fields=["session", "-id"], name="contextcall_session_idx"),
                    models.Index(fields=["created_at"], name="contextcall_created_idx"),
                ],
            },
        ),
    ]
