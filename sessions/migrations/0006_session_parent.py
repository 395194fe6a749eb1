"""Session.parent: a side request of a client (title, probe, sub-agent) links to its main session."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agent_sessions", "0005_model_profile_mid_system_messages"),
    ]

    operations = [
        migrations.AddField(
            model_name="session",
            name="parent",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="side_sessions",
                to="agent_sessions.session",
            ),
        ),
    ]
