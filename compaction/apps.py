from django.apps import AppConfig


class CompactionConfig(AppConfig):
    name = "compaction"
    label = "compaction"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registered here so that sessions never imports compaction (issue 4):
        # the auto-trigger after appends/usage (spec 000 §2.8), the 80 % note
        # (spec 002 §7), the budget's compaction block, and compact_context.
        from sessions import builtin_tools, output_store
        from sessions import selectors as session_selectors
        from sessions import services as session_services

        from . import selectors, services

        for hooks, hook in (
            (session_services.after_append_hooks, services.on_session_activity),
            (session_selectors.context_note_hooks, services.context_note),
            (session_selectors.budget_block_hooks, selectors.budget_block),
            (output_store.compaction_available_checks, services.can_make_room),
            (session_services.context_preflight_hooks, services.compact_before_call),
        ):
            if hook not in hooks:
                hooks.append(hook)
        builtin_tools.register(services.COMPACT_CONTEXT_TOOL, services.compact_context_tool)
