"""A model profile for claude-sonnet-4-6, the current Sonnet the README and the demo use.

claude-sonnet-4-5 reaches end of life on 2026-11-30 (the anthropic SDK warns on every
call). Window, output cap and prices as its predecessor's row (0002); it predates
Claude Opus 4.8, so no mid-conversation ``system`` message (0005).
"""

from django.db import migrations

PROVIDER, MODEL = "anthropic", "claude-sonnet-4-6"


def _prices(input_price: float, output_price: float) -> dict:
    return {
        "input": input_price,
        "output": output_price,
        "cache_write_5m": round(input_price * 1.25, 4),
        "cache_write_1h": round(input_price * 2, 4),
        "cache_read": round(input_price * 0.1, 4),
    }


def seed(apps, schema_editor):
    ModelProfile = apps.get_model("agent_sessions", "ModelProfile")
    ModelProfile.objects.update_or_create(
        provider=PROVIDER,
        model=MODEL,
        defaults={
            "context_window": 200_000,
            "max_output_tokens": 64_000,
            "buffer_tokens": None,
            "tokenizer": "tiktoken:cl100k_base",
            "min_cacheable_tokens": 1024,
            "prices": _prices(3, 15),
            "mid_system_messages": False,
        },
    )


def unseed(apps, schema_editor):
    ModelProfile = apps.get_model("agent_sessions", "ModelProfile")
    ModelProfile.objects.filter(provider=PROVIDER, model=MODEL).delete()


class Migration(migrations.Migration):
    dependencies = [("agent_sessions", "0010_message_fulltext_index")]

    operations = [migrations.RunPython(seed, unseed)]
