from django.apps import AppConfig


class PromptingConfig(AppConfig):
    """Prompt sections & cache breakpoints, tool deferral, cache accounting."""

    name = "prompting"
    label = "prompting"
    verbose_name = "Prompt caching and tool deferral"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here, not at module level: models are not ready before ready().
        from contextsvc.engine import deferral
        from sessions.extensions import REGISTRY

        from . import services, tool_search

        REGISTRY.register_tool(deferral.TOOL_SEARCH, tool_search.tool_search)
        # Bridge to the registry's positional ToolDeferral hook (h-prompting
        # registers its renamed function here instead).
        if not REGISTRY.tool_deferral:
            REGISTRY.tool_deferral.append(
                lambda session, tools: services.tools_registered(session=session, tools=tools)
            )
