"""ClientView keeps a chain hash of the client's view and per-message entries, not a JSON list."""

import hashlib

import django.db.models.deletion
from django.db import migrations, models


def _chains(fingerprints):
    # engine.providers.fingerprint.chain_hashes, frozen here as migrations must be.
    out, previous = [], ""
    for fingerprint in fingerprints:
        previous = hashlib.sha256(f"{previous}{fingerprint}".encode()).hexdigest()
        out.append(previous)
    return out


def forwards(apps, schema_editor):
    ClientView = apps.get_model("proxy", "ClientView")
    ClientViewEntry = apps.get_model("proxy", "ClientViewEntry")
    for view in ClientView.objects.iterator():
        fingerprints = list(view.fingerprints or [])
        chains = _chains(fingerprints)
        view.count = len(chains)
        view.chain = chains[-1] if chains else ""
        at = view.reply_at
        view.reply_chain = chains[at - 1] if at else ""
        view.save(update_fields=["count", "chain", "reply_chain"])
        ClientViewEntry.objects.bulk_create(
            ClientViewEntry(view=view, index=i, chain=chain)
            for i, chain in enumerate(chains)
            if i != at
        )


def backwards(apps, schema_editor):
    # The fingerprints cannot be recovered from their chain: the views restart
    # empty, and the next call of each client is taken as a new view.
    apps.get_model("proxy", "ClientView").objects.update(fingerprints=[])


class Migration(migrations.Migration):
    dependencies = [
        ("proxy", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="clientview",
            name="chain",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.AddField(
            model_name="clientview",
            name="count",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="clientview",
            name="reply_chain",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.CreateModel(
            name="ClientViewEntry",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("index", models.PositiveIntegerField()),
                ("chain", models.CharField(max_length=64)),
                (
                    "view",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="entries",
                        to="proxy.clientview",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("view", "index"), name="proxy_view_entry_unique"
                    )
                ],
            },
        ),
        migrations.RunPython(forwards, backwards),
        migrations.RemoveField(
            model_name="clientview",
            name="fingerprints",
        ),
    ]
