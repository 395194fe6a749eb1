"""A proxied Gemini call's cache reads are accounted as a Chat Completions call's are.

Both APIs count the cached prompt inside the prompt (``promptTokenCount`` ⊇
``cachedContentTokenCount``; ``prompt_tokens`` ⊇ ``cached_tokens``), so both
are split the same way: the cached part is a cache read, the rest is input. The
fakes cache by prefix as the APIs do (from 1024 tokens), so the second call of
a conversation reads its first call's prompt from the cache; the figures the
client got are the ones in the session's usage report, the call's record, its
cost and the session's totals.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from contextsvc.engine import caching
from sessions.models import ContextCall, Session, UsageReport
from sessions.services.prices import model_prices_set
from tests.proxy.conftest import PROXY_DB, UPSTREAM_KEY, asgi_gpt, asgi_http

pytestmark = PROXY_DB

# Over the fakes' 1024-token caching minimum (JSON characters / 4).
RULES = "Follow the project's rules: small commits, tests first, no network. " * 100
PRICES = {"input": 1.25, "output": 10.0, "cache_write_5m": 1.25, "cache_read": 0.125}
GEMINI = "gemini-fake-pro"
GPT = "gpt-fake-large"


def _usage_gemini(usage: dict[str, Any]) -> tuple[int, int, int]:
    """(prompt incl. cached, cached, output) of a ``usageMetadata``."""
    output = usage["candidatesTokenCount"] + usage.get("thoughtsTokenCount", 0)
    return usage["promptTokenCount"], usage.get("cachedContentTokenCount", 0), output


def _gemini_calls(agent_key: str, sid: str) -> list[tuple[int, int, int]]:
    headers = {"x-goog-api-key": UPSTREAM_KEY, "X-Contextsvc-Key": agent_key}
    headers["X-Contextsvc-Session"] = sid
    base = f"http://localhost/proxy/gemini/v1beta/models/{GEMINI}"
    system = {"parts": [{"text": RULES}]}

    async def calls():
        figures = []
        contents: list[dict[str, Any]] = []
        async with asgi_http() as client:
            for turn, streamed in enumerate([False, False, True]):
                contents.append({"role": "user", "parts": [{"text": f"step {turn}"}]})
                body = {"contents": contents, "systemInstruction": system}
                if streamed:
                    url = f"{base}:streamGenerateContent?alt=sse"
                    response = await client.post(url, json=body, headers=headers)
                    assert response.status_code == 200, response.text
                    chunks = [
                        json.loads(line[6:])
                        for line in response.text.splitlines()
                        if line.startswith("data: ")
                    ]
                    usage = chunks[-1]["usageMetadata"]
                    text = "".join(
                        p.get("text", "")
                        for c in chunks
                        for p in c["candidates"][0]["content"]["parts"]
                    )
                else:
                    response = await client.post(
                        f"{base}:generateContent", json=body, headers=headers
                    )
                    assert response.status_code == 200, response.text
                    data = response.json()
                    usage = data["usageMetadata"]
                    text = data["candidates"][0]["content"]["parts"][0]["text"]
                figures.append(_usage_gemini(usage))
                contents.append({"role": "model", "parts": [{"text": text}]})
        return figures

    return async_to_sync(calls)()


def _chat_calls(agent_key: str, sid: str) -> list[tuple[int, int, int]]:
    async def calls():
        figures = []
        client = asgi_gpt(agent_key, session=sid)
        messages: list[dict[str, Any]] = [{"role": "system", "content": RULES}]
        for turn in range(3):
            messages.append({"role": "user", "content": f"step {turn}"})
            reply = await client.chat.completions.create(model=GPT, messages=messages)
            usage = reply.usage
            cached = usage.prompt_tokens_details.cached_tokens or 0
            figures.append((usage.prompt_tokens, cached, usage.completion_tokens))
            messages.append({"role": "assistant", "content": reply.choices[0].message.content})
        return figures

    return async_to_sync(calls)()


@pytest.mark.parametrize(
    ("provider", "model", "calls"),
    [("google", GEMINI, _gemini_calls), ("openai", GPT, _chat_calls)],
    ids=["gemini", "chat"],
)
def test_cached_prompt_tokens_are_cache_reads_in_the_report_the_record_and_the_totals(
    upstreams, fake_gemini, alice_key, alice, provider, model, calls
):
    model_prices_set(provider=provider, model=model, prices=PRICES, actor="test")
    sid = f"ses_cache_{provider}"
    figures = calls(alice_key[1], sid)
    # The fakes' caches: nothing on the first call, the earlier prompt on the next ones.
    assert figures[0][1] == 0
    assert all(1024 <= cached < prompt for prompt, cached, _ in figures[1:])

    session = Session.objects.get(external_id=sid)
    reports = list(UsageReport.objects.filter(session=session).order_by("id"))
    records = list(ContextCall.objects.filter(session=session).order_by("id"))
    assert len(reports) == len(records) == len(figures) == 3
    prices = caching.Prices.from_table(records[0].prices)
    assert prices is not None
    for (prompt, cached, output), report, record in zip(figures, reports, records, strict=True):
        # The uncached part is input; the cached part a read; nothing is a write.
        assert (report.input_tokens, report.cache_read_tokens) == (prompt - cached, cached)
        assert (report.output_tokens, report.cache_creation_tokens) == (output, 0)
        assert (record.reported_input, record.cache_read) == (prompt - cached, cached)
        assert (record.reported_output, record.cache_write) == (output, 0)
        assert record.cost_usd == pytest.approx(
            caching.cost_usd(
                prices, input_tokens=prompt - cached, cache_read_tokens=cached, output_tokens=output
            )
        )
        if cached:
            assert record.cost_usd < record.cost_without_cache_usd

    listed = alice.get(f"sessions/{sid}/calls").json()["items"]
    assert sorted(c["cache_read"] for c in listed) == sorted(f[1] for f in figures)
    totals = alice.get(f"sessions/{sid}/budget").json()["cache"]["totals"]["reported"]
    assert totals["calls"] == 3
    assert totals["cache_read_input_tokens"] == sum(f[1] for f in figures)
