"""The services' typed inputs (TypedDicts) name exactly the fields of the API's input schemas."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from sessions import schemas
from sessions.services import inputs


@pytest.mark.parametrize(
    ("shape", "schema"),
    [
        (inputs.SessionCreateData, schemas.SessionCreateIn),
        (inputs.SessionPatchData, schemas.SessionPatchIn),
        (inputs.SectionData, schemas.SectionIn),
        (inputs.ToolData, schemas.ToolDefIn),
        (inputs.ToolCallData, schemas.ToolCallIn),
        (inputs.MessageData, schemas.MessageIn),
        (inputs.UsageData, schemas.UsageIn),
    ],
)
def test_service_input_has_the_fields_of_its_api_schema(shape: type, schema: type[BaseModel]):
    assert set(shape.__annotations__) == set(schema.model_fields)
    required = {name for name, field in schema.model_fields.items() if field.is_required()}
    assert required <= shape.__required_keys__


def test_a_dumped_api_input_is_what_the_service_takes():
    dumped = schemas.SessionCreateIn(model="gpt-4o").model_dump()
    assert inputs.SessionCreateData.__required_keys__ <= set(dumped)
    tool = schemas.ToolDefIn(name="t").model_dump()
    assert inputs.ToolData.__required_keys__ <= set(tool)
    section = schemas.SectionIn(name="s", content="c").model_dump()
    assert inputs.SectionData.__required_keys__ <= set(section)
