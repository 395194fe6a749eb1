"""The Models & prices page: every model's limits and prices, a form per model, and a
model added with its prices (docs/dashboard.md#models-and-prices).

A row's form posts with htmx and gets its row back (saved, or with each error
under its field's name); without htmx it is a plain form: a redirect back to
the row once saved, the page with its errors as a 422 when not. Thin: the
forms parse, ``services.prices`` stores, ``selectors_models`` reads.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect

from contextsvc.errors import ServiceError
from sessions.models import ModelProfile
from sessions.selectors_models import (
    PriceTarget,
    model_anchor,
    model_profile_for_operator,
    model_row_of,
    model_rows,
    price_target,
)
from sessions.services.prices import DEFAULT_MODEL, model_prices_set

from .http import HtmxHttpRequest, operator_required
from .prices_form import NewModelForm, PricesForm


def _page(
    request: HtmxHttpRequest,
    *,
    target: PriceTarget | None = None,
    new_form: NewModelForm | None = None,
    row_form: tuple[int, PricesForm] | None = None,
    saved: int | None = None,
    status: int = 200,
) -> HttpResponse:
    items = []
    for row in model_rows():
        pk = row.profile.pk
        form = row_form[1] if row_form and row_form[0] == pk else PricesForm.for_row(row)
        targeted = target is not None and target.row is not None and target.row.pk == pk
        items.append({"row": row, "form": form, "saved": saved == pk, "targeted": targeted})
    context: dict[str, Any] = {
        "items": items,
        "target": target,
        "new_form": new_form
        or NewModelForm.for_target(target if target and not target.row else None),
        "new_anchor": target.anchor if target and not target.row else "new-model",
    }
    return render(request, "sessions/models.html", context, status=status)


@require_GET
@operator_required
def model_prices(request: HtmxHttpRequest) -> HttpResponse:
    """The page; ``?provider=&model=`` opens it at that model (a new row prefilled when it has none)."""
    model = request.GET.get("model", "")[:200]
    provider = request.GET.get("provider", "")[:50]
    target = price_target(provider, model) if model else None
    saved = request.GET.get("saved", "")
    return _page(request, target=target, saved=int(saved) if saved.isdigit() else None)


def _actor(request: HtmxHttpRequest) -> str:
    return request.user.get_username()


def _back_to(profile: ModelProfile) -> str:
    url = reverse("dashboard:model_prices")
    return f"{url}?saved={profile.pk}#{model_anchor(profile.provider, profile.model)}"


@require_POST
@operator_required
def model_prices_save(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """One model's prices: all four, or none to clear them."""
    profile = model_profile_for_operator(pk)
    form = PricesForm(request.POST)
    if form.is_valid():
        try:
            profile, _ = model_prices_set(
                provider=profile.provider,
                model=profile.model or DEFAULT_MODEL,
                prices=form.prices(),
                actor=_actor(request),
            )
        except ServiceError as exc:
            form.refuse(exc)
    if form.errors:
        if request.htmx:
            # Swapped in place (htmx swaps a 200 only): the row with its errors.
            item = {"row": model_row_of(profile), "form": form}
            return render(request, "sessions/models.html#model-row", {"item": item})
        return _page(request, row_form=(profile.pk, form), status=422)
    if request.htmx:
        row = model_row_of(profile)
        item = {"row": row, "form": PricesForm.for_row(row), "saved": True}
        return render(request, "sessions/models.html#model-row", {"item": item})
    return HttpResponseRedirect(_back_to(profile))


@require_POST
@operator_required
def model_add(request: HtmxHttpRequest) -> HttpResponse:
    """A model with no profile of its own, added with its prices and limits."""
    form = NewModelForm(request.POST)
    if form.is_valid():
        try:
            profile, _ = model_prices_set(
                provider=form.cleaned_data["provider"],
                model=form.cleaned_data["model"],
                prices=form.prices(),
                limits=form.limits(),
                actor=_actor(request),
                only_new=True,
            )
        except ServiceError as exc:
            form.refuse(exc)
        else:
            url = _back_to(profile)
            return HttpResponseClientRedirect(url) if request.htmx else HttpResponseRedirect(url)
    if request.htmx:
        context = {"new_form": form, "new_anchor": "new-model"}
        return render(request, "sessions/models.html#new-model", context)
    return _page(request, new_form=form, status=422)
