"""Model profiles for the Gemini models clients name today, and Google's default row.

The seeded Google default (0002) was Gemini 1.0 Pro's 32,000-token window; the
models Gemini CLI and the Gen AI SDK use take 1,048,576 input tokens and answer
up to 65,536. A session created for one of them (the proxy creates it from the
URL's model) would otherwise compact and defer tools thirty times too early.
Rows match by prefix ("gemini-2.5-flash" also covers its dated previews,
"gemini-3" every Gemini 3 model). No prices are seeded: operators set them on
the Models & prices page. The default row changes only while it still holds
the seeded value (an operator's own stays); the old "gemini-pro" row gets its
model's output limit, 8,192, so it no longer borrows the default's.
"""

from django.db import migrations

PROVIDER = "google"
TOKENIZER = "tiktoken:cl100k_base"
WINDOW, MAX_OUTPUT = 1_048_576, 65_536
MODELS = ("gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite", "gemini-3")
SEEDED_DEFAULT = 32_000
OLD_PRO, OLD_PRO_OUTPUT = "gemini-pro", 8_192


def seed(apps, schema_editor):
    ModelProfile = apps.get_model("agent_sessions", "ModelProfile")
    for model in MODELS:
        ModelProfile.objects.get_or_create(
            provider=PROVIDER,
            model=model,
            defaults={
                "context_window": WINDOW,
                "max_output_tokens": MAX_OUTPUT,
                "tokenizer": TOKENIZER,
                "prices": {},
            },
        )
    ModelProfile.objects.filter(
        provider=PROVIDER, model="", context_window=SEEDED_DEFAULT, max_output_tokens=None
    ).update(context_window=WINDOW, max_output_tokens=MAX_OUTPUT)
    ModelProfile.objects.filter(provider=PROVIDER, model=OLD_PRO, max_output_tokens=None).update(
        max_output_tokens=OLD_PRO_OUTPUT
    )


def unseed(apps, schema_editor):
    ModelProfile = apps.get_model("agent_sessions", "ModelProfile")
    ModelProfile.objects.filter(provider=PROVIDER, model__in=MODELS).delete()
    ModelProfile.objects.filter(
        provider=PROVIDER, model="", context_window=WINDOW, max_output_tokens=MAX_OUTPUT
    ).update(context_window=SEEDED_DEFAULT, max_output_tokens=None)
    ModelProfile.objects.filter(
        provider=PROVIDER, model=OLD_PRO, max_output_tokens=OLD_PRO_OUTPUT
    ).update(max_output_tokens=None)


class Migration(migrations.Migration):
    dependencies = [("agent_sessions", "0021_call_request")]

    operations = [migrations.RunPython(seed, unseed)]
