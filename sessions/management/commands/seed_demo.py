"""Quick-start demo: an operator login, an agent key and a session with a few
turns (sessions/services/demo.py); prints where to find them. Idempotent."""

from __future__ import annotations

from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from sessions.services.demo import demo_banner, demo_seed


class Command(BaseCommand):
    help = "Create the quick-start demo (operator login, agent key, demo session)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--migrate", action="store_true", help="Run migrate first")

    def handle(self, *args: Any, **options: Any) -> None:
        if options.get("migrate"):
            call_command("migrate", interactive=False, verbosity=options.get("verbosity", 1))
        self.stdout.write(demo_banner(demo_seed()))
