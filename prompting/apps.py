from django.apps import AppConfig


class PromptingConfig(AppConfig):
    """Prompt sections & cache breakpoints, tool deferral, cache accounting (issue 6)."""

    name = "prompting"
    label = "prompting"
    verbose_name = "Prompt caching and tool deferral"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the built-in ``tool_search`` with sessions.builtin_tools.
        from . import tool_search  # noqa: F401
