"""The sessions app's dashboard URLs; contextsvc/urls.py mounts them in the ``dashboard`` namespace.

A session is addressed by its primary key, ``/sessions/<pk>/``: the agent's
session id (``external_id``) is unique per agent key only, so two keys may
both have a session "run-42". The sessions list searches by external id.
"""

from django.urls import path

from .dashboard import views, views_calls, views_find, views_models, views_policy

urlpatterns = [
    path("", views.session_list, name="session_list"),
    path("sessions/<int:pk>/", views.session_detail, name="session_detail"),
    path("sessions/<int:pk>/budget/", views.session_budget, name="session_budget"),
    path("sessions/<int:pk>/delete/", views.session_delete_view, name="session_delete"),
    path("sessions/<int:pk>/usage/", views.session_usage, name="session_usage"),
    path("sessions/<int:pk>/timeline/", views.session_timeline, name="session_timeline"),
    path("sessions/<int:pk>/find/", views_find.session_find, name="session_find"),
    path("sessions/<int:pk>/policy/", views_policy.session_policy, name="session_policy"),
    path("sessions/<int:pk>/messages/<int:seq>/", views.message_full, name="message_full"),
    path("sessions/<int:pk>/transcript/", views.session_transcript, name="session_transcript"),
    path("sessions/<int:pk>/outputs/<str:ref>/", views.output_view, name="output_view"),
    path("sessions/<int:pk>/outputs/<str:ref>/grep/", views.output_grep, name="output_grep"),
    path("sessions/<int:pk>/outputs/<str:ref>/raw/", views.output_raw, name="output_raw"),
    path("sessions/<int:pk>/calls/", views_calls.session_calls, name="session_calls"),
    path("sessions/<int:pk>/calls/at/", views_calls.session_call_at, name="session_call_at"),
    path("sessions/<int:pk>/calls/<int:call_id>/", views_calls.session_call, name="session_call"),
    path("cost/", views_calls.cost_overview, name="cost_overview"),
    path("models/", views_models.model_prices, name="model_prices"),
    path("models/new/", views_models.model_add, name="model_add"),
    path("models/<int:pk>/prices/", views_models.model_prices_save, name="model_prices_save"),
    path("keys/", views.key_list, name="key_list"),
    path("keys/<int:pk>/revoke/", views.key_revoke, name="key_revoke"),
]
