"""The proxy app: async views in front of the session services; it adds the client's view to the inspector."""

from django.apps import AppConfig


class ProxyConfig(AppConfig):
    name = "proxy"
    label = "proxy"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here, not at module level: models are not ready before ready().
        # The client's own compactions on the usage chart and in a panel.
        from sessions.extensions import REGISTRY

        from . import dashboard

        REGISTRY.add(REGISTRY.window_events, dashboard.window_events)
        REGISTRY.add(REGISTRY.inspector_panels, dashboard.client_compactions_panel)
