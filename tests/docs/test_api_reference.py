"""docs/reference/api.md is the API's OpenAPI schema as a page: regenerated, it must
be byte for byte what is committed (``bin/docs api`` rewrites it), and it names every
operation, parameter, request field and response status of the schema."""

from __future__ import annotations

import re

import pytest

from docsite import api as api_page


@pytest.fixture(scope="module")
def schema() -> dict:
    return api_page.load_schema()


def test_the_committed_page_is_the_schema_of_today(schema):
    fresh = api_page.render(schema)
    committed = api_page.PAGE.read_text()
    assert committed == fresh, "docs/reference/api.md is stale: run bin/docs api"


def _section(page: str, method: str, path: str) -> str:
    """The page's text for one operation: from its heading to the next heading."""
    anchor = api_page.operation_anchor(method, path)
    start = page.index(f"{{#{anchor}}}")
    end = page.find("\n### ", start)
    return page[start : end if end != -1 else len(page)]


def test_every_operation_is_documented_in_full(schema):
    page = api_page.render(schema)
    operations = [
        (method.upper(), path, operation)
        for path, methods in schema["paths"].items()
        for method, operation in methods.items()
    ]
    assert len(operations) >= 25
    schemas = schema["components"]["schemas"]
    for method, path, operation in operations:
        section = _section(page, method, path)
        assert f"### {method} `{path.removeprefix(api_page.PREFIX)}`" in page
        for param in operation.get("parameters", []):
            assert f"| `{param['name']}` | {param['in']} |" in section, (method, path, param)
        for content in operation.get("requestBody", {}).get("content", {}).values():
            ref = content["schema"].get("$ref")
            for field in schemas[ref.rsplit("/", 1)[-1]]["properties"] if ref else ():
                assert f"| `{field}` |" in section, (method, path, field)
        statuses = re.findall(r"^\| (\d{3}) \|", section, re.M)
        assert sorted(statuses) == sorted(operation["responses"]), (method, path)
    for name in schemas:
        assert f"{{#{api_page.schema_anchor(name)}}}" in page


def test_types_link_to_their_schemas_and_cells_stay_in_their_column():
    assert api_page.type_of({"$ref": "#/components/schemas/AppendOut"}) == (
        "[`AppendOut`](#schema-appendout)"
    )
    nullable = {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]}
    assert api_page.type_of(nullable) == "array of string or null"
    assert api_page.type_of({"enum": ["a", "b"]}) == '`"a"` \\| `"b"`'
    # A pipe or a tag outside code would break the table or vanish; inside code it is literal.
    assert api_page._esc("a | <b> `x|<y>`") == "a \\| &lt;b&gt; `x|<y>`"
    assert api_page.constraints_of({"anyOf": [{"maxLength": 5}, {"type": "null"}]}) == (
        "length ≤ 5"
    )
