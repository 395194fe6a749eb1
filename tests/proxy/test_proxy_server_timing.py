"""Every forwarded answer says, in ``Server-Timing``, what the proxy's own work took
before it forwarded (gate, sync, build) and what upstream took until its headers."""

from __future__ import annotations

import re
import time

import anthropic
import pytest
from asgiref.sync import async_to_sync

from fakes.streams import ScriptedReply
from tests.proxy.conftest import PROXY_DB, asgi_claude

pytestmark = PROXY_DB

METRIC = re.compile(r'(\w+);dur=([0-9.]+);desc="([^"]*)"')


def timings(header: str) -> dict[str, float]:
    return {name: float(dur) for name, dur, _ in METRIC.findall(header)}


@pytest.mark.parametrize("stream", [False, True])
def test_server_timing_splits_the_proxy_from_upstream(upstreams, alice_key, stream):
    fake, _ = upstreams
    fake.delay = 0.25  # upstream takes a quarter of a second before it answers
    fake.script(ScriptedReply(text="timed"))

    async def call():
        client = asgi_claude(alice_key[1], session=f"ses_timing_{stream}")
        started = time.perf_counter()
        raw = await client.messages.with_raw_response.create(
            model="claude-opus-4-5",
            max_tokens=100,
            messages=[{"role": "user", "content": "hi"}],
            stream=stream,
        )
        elapsed = (time.perf_counter() - started) * 1000
        return raw.headers.get("server-timing", ""), elapsed

    header, elapsed = async_to_sync(call)()
    got = timings(header)
    assert set(got) == {"proxy", "upstream"}, header
    assert got["upstream"] >= 250, header  # the fake's delay is upstream's, not ours
    assert got["proxy"] > 0, header
    assert got["proxy"] + got["upstream"] <= elapsed + 1, (header, elapsed)


def test_an_answer_the_proxy_refuses_has_no_timing(upstreams, alice_key):
    async def call():
        client = asgi_claude(alice_key[1], session="ses_timing_refused")
        raw = await client.messages.with_raw_response.create(
            model="claude-opus-4-5", max_tokens=100, messages=[{"role": "robot", "content": "hi"}]
        )
        return raw

    with pytest.raises(anthropic.BadRequestError) as caught:
        async_to_sync(call)()
    assert "server-timing" not in caught.value.response.headers
