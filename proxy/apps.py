"""The proxy app: async views in front of the session services; it registers no hooks."""

from django.apps import AppConfig


class ProxyConfig(AppConfig):
    name = "proxy"
    label = "proxy"
    default_auto_field = "django.db.models.BigAutoField"
