"""The proxy reads a request's JSON with orjson, and with the stdlib for what orjson refuses.

Parsing is the one step that reads the client's whole history on every call;
orjson does it several times faster. What only the stdlib reads (integers
past 64 bits, NaN, UTF-16 text) is read as before, and what neither reads is
the same provider-shaped 400 (``ConversionError``).
"""

from __future__ import annotations

import json
import math

import pytest

from contextsvc.engine.providers.common import ConversionError
from proxy.views import _body


class Request:
    def __init__(self, body: bytes) -> None:
        self.body = body


def test_a_body_reads_as_the_stdlib_reads_it():
    body = {"model": "m", "messages": [{"role": "user", "content": "héllo \u2028 🙂"}] * 3}
    raw = json.dumps(body).encode()
    assert _body(Request(raw)) == json.loads(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"n": 18446744073709551616}',  # past 64 bits
        b'{"n": NaN}',
        json.dumps({"n": 1}).encode("utf-16"),
    ],
)
def test_what_orjson_refuses_the_stdlib_reads(raw):
    assert _body(Request(raw)) == json.loads(raw) or math.isnan(_body(Request(raw))["n"])


@pytest.mark.parametrize("raw", [b"{not json", b"", b"[1, 2]", b'"text"'])
def test_what_is_not_a_json_object_is_a_conversion_error(raw):
    with pytest.raises(ConversionError):
        _body(Request(raw))
