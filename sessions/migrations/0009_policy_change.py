"""PolicyChange: the audit line of each change of a session's policy (the policy page, PATCH)."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agent_sessions", "0008_message_pinned"),
    ]

    operations = [
        migrations.CreateModel(
            name="PolicyChange",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("actor", models.CharField(max_length=200)),
                ("after_seq", models.PositiveIntegerField(default=0)),
                ("changes", models.JSONField(default=list)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "session",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="policy_changes",
                        to="agent_sessions.session",
                    ),
                ),
            ],
            options={
                "ordering": ["session", "id"],
                "indexes": [
                    models.Index(
                        fields=["session", "after_seq"], name="policy_change_session_seq_idx"
                    )
                ],
            },
        ),
    ]
