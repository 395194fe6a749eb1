from django.apps import AppConfig


class CompactionConfig(AppConfig):
    name = "compaction"
    label = "compaction"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here, not at module level: models are not ready before ready().
        # Compaction plugs into sessions through its registry: the auto-trigger
        # after appends/usage (spec 000 §2.8), the 80 % note (spec 002 §7), the
        # budget's compaction block, the tool-budget check, compact_context, and
        # the dashboard's compaction marks on the usage chart and Compact panel.
        from sessions.extensions import REGISTRY

        from . import selectors, services
        from .dashboard import selectors as dashboard_selectors
        from .dashboard import views as dashboard_views

        for hooks, hook in (
            (REGISTRY.after_append, services.on_session_activity),
            (REGISTRY.context_notes, services.context_note),
            (REGISTRY.budget_blocks, selectors.budget_block),
            (REGISTRY.compaction_available, services.can_make_room),
            (REGISTRY.context_preflight, services.compact_before_call),
            (REGISTRY.window_events, dashboard_selectors.window_events),
            (REGISTRY.inspector_panels, dashboard_views.compact_panel),
        ):
            REGISTRY.add(hooks, hook)
        REGISTRY.register_tool(services.COMPACT_CONTEXT_TOOL, services.compact_context_tool)
