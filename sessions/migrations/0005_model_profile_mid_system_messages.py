"""Mid-conversation ``system`` messages: a transcript role and a model-profile flag.

The Messages API takes a ``system`` message inside ``messages`` from Claude
Opus 4.8 on; every Anthropic model seeded before it answers 400 "role 'system'
is not supported on this model", so those rows are set to false. Provider
default rows stay true: an unknown (future) model is assumed to accept them.
"""

from django.db import migrations, models

# The Anthropic profiles of 0002_seed_model_profiles, all older than Opus 4.8.
OLDER_ANTHROPIC = (
    "claude-opus-4-5",
    "claude-opus-4-1",
    "claude-opus-4-0",
    "claude-sonnet-4-5",
    "claude-sonnet-4-0",
    "claude-3-7-sonnet-latest",
    "claude-haiku-4-5",
    "claude-3-5-haiku-latest",
    "claude-3-5-sonnet",
    "claude-3-opus",
)


def mark_older(apps, schema_editor):
    ModelProfile = apps.get_model("agent_sessions", "ModelProfile")
    ModelProfile.objects.filter(provider="anthropic", model__in=OLDER_ANTHROPIC).update(
        mid_system_messages=False
    )


class Migration(migrations.Migration):
    dependencies = [("agent_sessions", "0004_message_tool_call_id_idx")]

    operations = [
        migrations.AddField(
            model_name="modelprofile",
            name="mid_system_messages",
            field=models.BooleanField(default=True),
        ),
        migrations.AlterField(
            model_name="message",
            name="role",
            field=models.CharField(
                choices=[
                    ("user", "User"),
                    ("assistant", "Assistant"),
                    ("tool", "Tool"),
                    ("system", "System"),
                ],
                max_length=10,
            ),
        ),
        migrations.RunPython(mark_older, migrations.RunPython.noop),
    ]
