"""The timeline's finder: jump to a seq or a turn, filter, search a long session.

One endpoint answers the finder bar: a jump renders the timeline page around
the message, a filter or a search renders a flat list of matching messages
(each with a link back to its place in the timeline), and neither renders the
newest page, as the Timeline tab does.
"""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from sessions.services.search_index import search_index_catch_up

from .forms import int_param
from .http import HtmxHttpRequest, operator_required
from .selectors.detail import session_for_operator
from .selectors.finder import FILTERS, find_messages, timeline_around, turn_start_seq
from .selectors.timeline import timeline_page


@require_GET
@operator_required
def session_find(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    session = session_for_operator(pk)
    seq = int_param(request.GET.get("seq"), minimum=1)
    turn = int_param(request.GET.get("turn"), minimum=1)
    kind = request.GET.get("kind", "")
    q = request.GET.get("q", "")
    context: dict = {"session": session, "filters": FILTERS, "finder": {"kind": kind, "q": q}}
    if seq or turn:
        context["finder"].update(seq=seq or "", turn=turn or "")
        target = turn_start_seq(session, turn) if turn else seq
        if target is None or target > session.last_seq:
            what = f"turn {turn}" if turn else f"message #{seq}"
            context["finder"]["error"] = f"No {what} in this session (last: #{session.last_seq})."
            context["timeline"] = timeline_page(session)
        else:
            context["timeline"] = timeline_around(session, target)
        return render(request, "sessions/detail.html#timeline", context)
    if (kind and kind in FILTERS) or q.strip():
        if q.strip():
            search_index_catch_up(session_id=session.pk)  # the words appended since the last search
        context["found"] = find_messages(
            session,
            kind=kind,
            q=q,
            before=int_param(request.GET.get("before"), minimum=1),
            page=int_param(request.GET.get("page"), default=1, minimum=1) or 1,
        )
        more = request.GET.get("before") or request.GET.get("page")
        partial = "finder-more" if more else "finder-timeline"
        return render(request, f"sessions/_finder.html#{partial}", context)
    context["timeline"] = timeline_page(session)
    return render(request, "sessions/detail.html#timeline", context)
