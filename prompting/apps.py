"""The prompting app's config: plugs prompting into sessions through the registry."""

from django.apps import AppConfig


class PromptingConfig(AppConfig):
    """Prompt sections & cache breakpoints, tool deferral, cache accounting."""

    name = "prompting"
    label = "prompting"
    verbose_name = "Prompt caching and tool deferral"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here, not at module level: models are not ready before ready().
        # Prompting plugs into sessions through its registry: the tool_search
        # tool, deferral when tools are registered (docs/concepts/deferral.md#deferral-threshold),
        # and the budget's cache, deferral and degraded blocks.
        from contextsvc.engine import deferral
        from sessions.extensions import REGISTRY

        from .services import blocks, policy, tool_search, tools

        REGISTRY.register_tool(deferral.TOOL_SEARCH, tool_search.search_and_load_tools)
        REGISTRY.add(REGISTRY.tool_deferral, tools.record_registered_tools)
        REGISTRY.add(REGISTRY.budget_blocks, blocks.budget_blocks)
        # A changed model profile (prices, limits) is read again by the next build.
        REGISTRY.add(REGISTRY.profiles_changed, policy.forget_profiles)
