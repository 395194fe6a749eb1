"""CompactionRun.reason: why the run was requested, with its numbers ({} for older runs)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("compaction", "0006_snapshot_head_end_seq"),
    ]

    operations = [
        migrations.AddField(
            model_name="compactionrun",
            name="reason",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
