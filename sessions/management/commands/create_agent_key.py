"""manage.py create_agent_key NAME: a new agent key, printed once on the last line."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from sessions.services.keys import agent_key_create


class Command(BaseCommand):
    help = "Create an agent API key. The key is printed once, alone on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="Agent name (shown in the dashboard)")

    def handle(self, *args: Any, name: str, **options: Any) -> None:
        key, raw = agent_key_create(name=name)
        self.stderr.write(f"Created key #{key.pk} for {key.name!r}; store it now, it is not kept:")
        self.stdout.write(raw)
