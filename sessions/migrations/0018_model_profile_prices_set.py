"""Who set a model profile's prices, and when: null for the published prices seeded by 0002/0011."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("agent_sessions", "0017_recall")]

    operations = [
        migrations.AddField(
            model_name="modelprofile",
            name="prices_set_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="modelprofile",
            name="prices_set_by",
            field=models.CharField(blank=True, default="", max_length=150),
        ),
    ]
