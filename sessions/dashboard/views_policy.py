"""The policy page of a session: the effective policy, and the staff's form that changes it.

The form posts to the same service as ``PATCH /api/v1/sessions/{sid}`` with
the same schema, so the page can never store a policy the API would refuse;
the change leaves an audit line (``PolicyChange``) in the session's timeline.
A plain form (post, redirect, get): a 422 page names each bad field.
"""

from __future__ import annotations

from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from contextsvc.errors import ServiceError
from sessions.services.sessions import session_update

from .http import HtmxHttpRequest, operator_required
from .policy_form import error_path, parse_policy_form
from .selectors.detail import session_for_operator
from .selectors.policy import GENERAL, policy_view


@require_http_methods(["GET", "POST"])
@operator_required
def session_policy(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    session = session_for_operator(pk)
    view = policy_view(session)
    context = {"session": session, "policy": view, "errors": {}, "unchanged": False}
    context["saved"] = request.method == "GET" and request.GET.get("saved") == "1"
    if request.method == "GET":
        return render(request, "sessions/policy.html", context)

    form = parse_policy_form(request.POST, view.sections, session.policy or {})
    if form.is_valid and form.patch:
        try:
            session_update(
                session=session,
                data={"policy": form.patch},
                actor=f"operator {request.user.get_username()}",
            )
        except ServiceError as exc:  # a rule beyond the schema (e.g. a target's limits)
            field = str((exc.details or {}).get("field", "")).removeprefix("policy.")
            form.errors[
                error_path(tuple(field.split(".")), view.sections) if field else GENERAL
            ] = exc.message
        else:
            url = reverse("dashboard:session_policy", args=[session.pk])
            return HttpResponseRedirect(f"{url}?saved=1")
    if form.is_valid:
        context["unchanged"] = True
        return render(request, "sessions/policy.html", context)
    for section in view.sections:
        section.error = form.errors.get(section.name, "")
        for f in section.fields:
            f.error = form.errors.get(f.path, "")
            f.raw = form.raw.get(f.path)
    context["errors"] = form.errors
    return render(request, "sessions/policy.html", context, status=422)
