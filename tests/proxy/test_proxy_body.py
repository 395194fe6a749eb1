"""The proxy reads a request's JSON once, with orjson, strictly (``contextsvc.body_gate``).

Parsing is the one step that reads the client's whole history on every call.
What orjson refuses (NaN, Infinity, a lone surrogate, a number infinite as a
double, a nesting past 1,024 levels) is refused; a body in UTF-16 or UTF-32
is read as the JSON text it is; an integer past 64 bits is read as a float.
"""

from __future__ import annotations

import json

import pytest

from contextsvc.body_gate import BodyRefused, check_json, parse_json
from proxy import gate
from proxy.providers import ANTHROPIC


class Request:
    def __init__(self, body: bytes) -> None:
        self.body = body
        self.path = "/proxy/anthropic/v1/messages"
        self.headers: dict[str, str] = {}


def test_a_body_reads_as_the_stdlib_reads_it():
    body = {"model": "m", "messages": [{"role": "user", "content": "héllo \u2028 🙂"}] * 3}
    raw = json.dumps(body).encode()
    assert gate.read(Request(raw), ANTHROPIC) == json.loads(raw)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32"])
def test_json_in_another_unicode_encoding_is_read(encoding):
    assert parse_json(json.dumps({"n": "é"}).encode(encoding)) == {"n": "é"}


def test_an_integer_past_64_bits_is_read_as_a_float():
    assert parse_json(b'{"n": 18446744073709551616}') == {"n": 2.0**64}


@pytest.mark.parametrize(
    "raw",
    [
        b'{"n": NaN}',
        b'{"n": Infinity}',
        b'{"n": -Infinity}',
        b'{"n": 1e999}',
        b'{"n": "\\ud800"}',
        b'{"n": "\\udc00x"}',
        '{"n": "\ud800"}'.encode("utf-16", "surrogatepass"),
        b"[" * 1100 + b"]" * 1100,
    ],
)
def test_what_orjson_refuses_is_refused_naming_the_body(raw):
    with pytest.raises(BodyRefused) as refused:
        parse_json(raw)
    assert refused.value.field == "body" and refused.value.status == 400


@pytest.mark.parametrize("raw", [b"{not json", b"", b"[1, 2]", b'"text"'])
def test_what_is_not_a_json_object_is_refused(raw):
    with pytest.raises(BodyRefused):
        gate.read(Request(raw), ANTHROPIC)


def test_free_json_nests_at_most_64_levels():
    value: object = 1
    for _ in range(64):
        value = [value]
    assert check_json(value, "x") is value
    with pytest.raises(BodyRefused) as refused:
        check_json([value], "tools.0")
    assert refused.value.field == "tools.0"
    assert "deeper than 64" in refused.value.message
