"""Model profiles over the API: every key reads limits and prices; only an operator sets prices.

Agent keys are tenants and a model's prices are every tenant's, so the write
takes the operator's credential, a staff user's signed-in session (with its
CSRF token), and answers an agent key 403 (docs/api.md#models-and-prices).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Path, Router, Status

from contextsvc.openapi import ErrorOut, declare_errors

from .auth import AgentKeyAuth, AgentKeyRefused, OperatorSessionAuth
from .schemas_models import ModelListOut, ModelOut, PricesIn
from .selectors_models import model_row_of, model_rows, model_to_dict
from .services.prices import LIMIT_KEYS, model_prices_set

router = Router(tags=["models"])


@router.get(
    "/models",
    response={200: ModelListOut, 403: ErrorOut},
    auth=[AgentKeyAuth(), OperatorSessionAuth()],
)
def list_models(request: HttpRequest) -> dict[str, Any]:
    """Every model profile with the limits a session on it gets and the prices it is charged
    (`model` `*`: the provider's default row, for any model it has no row for)."""
    return {"items": [model_to_dict(row) for row in model_rows()]}


@router.put(
    "/models/{provider}/{path:model}/prices",
    response={200: ModelOut, 201: ModelOut, 403: ErrorOut},
    auth=[OperatorSessionAuth(), AgentKeyRefused()],
)
def put_model_prices(
    request: HttpRequest,
    payload: PricesIn,
    provider: str = Path(..., description="anthropic, openai, google, …"),
    model: str = Path(
        ..., description="the model's name (may hold '/'); * for the provider's default row"
    ),
) -> Status:
    """Set a model's prices (operators only: a staff user's signed-in session with its
    `X-CSRFToken`; an agent key is a 403). A model with no profile of its own is added
    (201) with the limits it resolves to today unless the body gives them. Calls already
    recorded keep the prices of their build."""
    data = payload.model_dump(exclude_none=True)
    limits = {key: data.pop(key) for key in LIMIT_KEYS if key in data}
    row, created = model_prices_set(
        provider=provider,
        model=model,
        prices=data,
        limits=limits,
        actor=request.auth.get_username(),
    )
    return Status(201 if created else 200, model_to_dict(model_row_of(row)))


declare_errors(router)
