"""The cache chain's tag, filled in for the chains stored before it."""

from django.db import migrations, models

DIGEST_BYTES = 8  # contextsvc.engine.caching.DIGEST_BYTES when this was written


def tag_stored_chains(apps, schema_editor):
    PromptState = apps.get_model("prompting", "PromptState")
    for state in PromptState.objects.exclude(last_chain=b"").only("pk", "last_chain").iterator():
        chain = bytes(state.last_chain)
        tag = f"{chain[-DIGEST_BYTES:].hex()}:{len(chain) // DIGEST_BYTES}" if chain else ""
        PromptState.objects.filter(pk=state.pk).update(chain_tag=tag)


class Migration(migrations.Migration):
    dependencies = [("prompting", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="promptstate",
            name="chain_tag",
            field=models.CharField(blank=True, default="", max_length=40),
        ),
        migrations.RunPython(tag_stored_chains, migrations.RunPython.noop),
    ]
