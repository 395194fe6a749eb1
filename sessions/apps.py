from django.apps import AppConfig


class AgentSessionsConfig(AppConfig):
    # The package is `sessions/` (DESIGN.md layout); the label differs from
    # django.contrib.sessions', which the dashboard's login needs too.
    name = "sessions"
    label = "agent_sessions"
    verbose_name = "Agent sessions"
    default_auto_field = "django.db.models.BigAutoField"
