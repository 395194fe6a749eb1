"""The sessions app: its config, and what it registers in ``sessions.extensions`` at start."""

from django.apps import AppConfig


class AgentSessionsConfig(AppConfig):
    # The package is `sessions/` (DESIGN.md layout); the label differs from
    # django.contrib.sessions', which the dashboard's login needs too.
    name = "sessions"
    label = "agent_sessions"
    verbose_name = "Agent sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here, not at module level: models are not ready before ready().
        from .extensions import REGISTRY
        from .outputs import gc, tools
        from .recall import index as recall_index
        from .recall import tool as recall

        for check in (gc.live_message_refs, gc.retained_text_refs, gc.active_session_refs):
            REGISTRY.add(REGISTRY.reference_checks, check)
        REGISTRY.register_tool(tools.READ_TOOL, tools.call_read)
        REGISTRY.register_tool(tools.GREP_TOOL, tools.call_grep)
        REGISTRY.register_tool(recall.SEARCH_TOOL, recall.call_search)
        REGISTRY.add(REGISTRY.after_append, recall_index.recall_schedule)
