"""manage.py revoke_agent_key KEY: revoke an agent key by its id or prefix."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from sessions.models import AgentKey
from sessions.services.keys import agent_key_revoke


class Command(BaseCommand):
    help = "Revoke an agent API key by its id or its prefix (first characters)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("key", help="Key id or prefix, as listed by the dashboard")

    def handle(self, *args: Any, key: str, **options: Any) -> None:
        qs = (
            AgentKey.objects.filter(pk=int(key))
            if key.isdigit()
            else AgentKey.objects.filter(prefix=key[:10])
        )
        found = list(qs[:2])
        if len(found) != 1:
            raise CommandError(f"{key!r} matches {len(found) or 'no'} keys; give the id instead")
        agent_key_revoke(key=found[0])
        self.stdout.write(f"Revoked {found[0]}")
