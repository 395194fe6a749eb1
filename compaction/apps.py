"""The compaction app: plugs its hooks and the compact_context tool into the sessions registry."""

from django.apps import AppConfig


class CompactionConfig(AppConfig):
    name = "compaction"
    label = "compaction"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here, not at module level: models are not ready before ready().
        # Compaction plugs into sessions through its registry: the auto-trigger
        # after appends/usage (docs/concepts/compaction.md#check-points), the 80 % note
        # (docs/concepts/guard.md#usage-note), the budget's compaction block, the tool-budget check,
        # compact_context, and the dashboard's compaction marks on the usage chart and Compact
        # panel.
        from sessions.extensions import REGISTRY

        from . import selectors
        from .dashboard import selectors as dashboard_selectors
        from .dashboard import views as dashboard_views
        from .services import hooks, tool

        for hooks_list, hook in (
            (REGISTRY.after_append, hooks.on_session_activity),
            (REGISTRY.context_notes, hooks.context_note),
            (REGISTRY.budget_blocks, selectors.budget_block),
            (REGISTRY.compaction_available, hooks.can_make_room),
            (REGISTRY.context_preflight, hooks.compact_before_call),
            (REGISTRY.window_events, dashboard_selectors.window_events),
            (REGISTRY.inspector_panels, dashboard_views.compact_panel),
            (REGISTRY.before_delete, hooks.lock_runs_before_delete),
        ):
            REGISTRY.add(hooks_list, hook)
        REGISTRY.register_tool(tool.COMPACT_CONTEXT_TOOL, tool.compact_context_tool)
