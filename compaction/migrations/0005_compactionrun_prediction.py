"""CompactionRun.prediction: the dry run's figures kept beside the result (predicted vs actual)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("compaction", "0004_compactionrun_cost"),
    ]

    operations = [
        migrations.AddField(
            model_name="compactionrun",
            name="prediction",
            field=models.JSONField(blank=True, null=True),
        ),
    ]
