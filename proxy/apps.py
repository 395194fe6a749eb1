"""The proxy app: async views in front of the session services; it marks client compactions
on the dashboard's usage chart (``REGISTRY.window_events``) and lists them, with a side
session's parent, in an inspector panel."""

from django.apps import AppConfig


class ProxyConfig(AppConfig):
    name = "proxy"
    label = "proxy"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from sessions.extensions import REGISTRY

        from . import dashboard, selectors

        REGISTRY.add(REGISTRY.window_events, selectors.window_events)
        REGISTRY.add(REGISTRY.inspector_panels, dashboard.client_compactions_panel)
