"""Seed ModelProfile with current Anthropic and OpenAI models.

Windows and output caps from the providers' model pages; prices in USD per
million tokens; cache writes cost 1.25x input (5 min) / 2x (1 h), reads 0.1x.
Minimum cacheable prefix lengths from Anthropic's prompt-caching docs.
Operators edit these rows in the admin; resolution is model > provider > defaults.
"""

from django.db import migrations

TOKENIZER = "tiktoken:cl100k_base"


def _prices(input_price: float, output_price: float) -> dict:
    return {
        "input": input_price,
        "output": output_price,
        "cache_write_5m": round(input_price * 1.25, 4),
        "cache_write_1h": round(input_price * 2, 4),
        "cache_read": round(input_price * 0.1, 4),
    }


PROFILES = [
    # provider defaults (model = "")
    ("anthropic", "", 200_000, None, None, 1024, {}),
    ("openai", "", 128_000, None, None, 1024, {}),
    ("google", "", 32_000, None, None, None, {}),
    # Anthropic
    ("anthropic", "claude-opus-4-5", 200_000, 64_000, None, 4096, _prices(5, 25)),
    ("anthropic", "claude-opus-4-1", 200_000, 32_000, None, 1024, _prices(15, 75)),
    ("anthropic", "claude-opus-4-0", 200_000, 32_000, None, 1024, _prices(15, 75)),
    ("anthropic", "claude-sonnet-4-5", 200_000, 64_000, None, 1024, _prices(3, 15)),
    ("anthropic", "claude-sonnet-4-0", 200_000, 64_000, None, 1024, _prices(3, 15)),
    ("anthropic", "claude-3-7-sonnet-latest", 200_000, 64_000, None, 1024, _prices(3, 15)),
    ("anthropic", "claude-haiku-4-5", 200_000, 64_000, None, 4096, _prices(1, 5)),
    ("anthropic", "claude-3-5-haiku-latest", 200_000, 8_192, None, 2048, _prices(0.8, 4)),
    ("anthropic", "claude-3-5-sonnet", 200_000, 8_192, None, 1024, _prices(3, 15)),
    ("anthropic", "claude-3-opus", 200_000, 4_096, None, 1024, _prices(15, 75)),
    # OpenAI (automatic prefix caching from 1,024 tokens; reads at the cached price)
    (
        "openai",
        "gpt-4o",
        128_000,
        16_384,
        None,
        1024,
        {"input": 2.5, "output": 10, "cache_read": 1.25},
    ),
    (
        "openai",
        "gpt-4o-mini",
        128_000,
        16_384,
        None,
        1024,
        {"input": 0.15, "output": 0.6, "cache_read": 0.075},
    ),
    ("openai", "gpt-4-turbo", 128_000, 4_096, None, None, {"input": 10, "output": 30}),
    (
        "openai",
        "gpt-4.1",
        1_047_576,
        32_768,
        None,
        1024,
        {"input": 2, "output": 8, "cache_read": 0.5},
    ),
    (
        "openai",
        "gpt-5",
        400_000,
        128_000,
        None,
        1024,
        {"input": 1.25, "output": 10, "cache_read": 0.125},
    ),
    ("openai", "o3", 200_000, 100_000, None, 1024, {"input": 2, "output": 8, "cache_read": 0.5}),
    # docs/concepts/context-build.md#limit-resolution: well-known windows
    ("google", "gemini-pro", 32_000, None, None, None, {}),
]


def seed(apps, schema_editor):
    ModelProfile = apps.get_model("agent_sessions", "ModelProfile")
    for provider, model, window, max_out, buffer, min_cache, prices in PROFILES:
        ModelProfile.objects.update_or_create(
            provider=provider,
            model=model,
            defaults={
                "context_window": window,
                "max_output_tokens": max_out,
                "buffer_tokens": buffer,
                "tokenizer": TOKENIZER,
                "min_cacheable_tokens": min_cache,
                "prices": prices,
            },
        )


def unseed(apps, schema_editor):
    ModelProfile = apps.get_model("agent_sessions", "ModelProfile")
    for provider, model, *_ in PROFILES:
        ModelProfile.objects.filter(provider=provider, model=model).delete()


class Migration(migrations.Migration):
    dependencies = [("agent_sessions", "0001_initial")]
    operations = [migrations.RunPython(seed, unseed)]
