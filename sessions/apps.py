"""The sessions app: fills the extension registry with its tools and GC reference checks."""

from django.apps import AppConfig


class AgentSessionsConfig(AppConfig):
    # The package is `sessions/` (DESIGN.md layout); the label differs from
    # django.contrib.sessions', which the dashboard's login needs too.
    name = "sessions"
    label = "agent_sessions"
    verbose_name = "Agent sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import api_outputs, output_store
        from .extensions import REGISTRY

        for check in (output_store.live_message_refs, output_store.retained_text_refs):
            REGISTRY.add(REGISTRY.reference_checks, check)
        REGISTRY.register_tool(api_outputs.READ_TOOL, api_outputs.call_read)
        REGISTRY.register_tool(api_outputs.GREP_TOOL, api_outputs.call_grep)
