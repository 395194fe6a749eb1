"""Write docs/configuration.md's variable tables from the declarations (contextsvc/variables/).

``--check`` writes nothing and fails when the page differs from a fresh generation.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from contextsvc.variables import VARIABLES
from contextsvc.variables.docs import PAGE, page


class Command(BaseCommand):
    help = "Generate docs/configuration.md's variable tables from contextsvc/variables/."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--check", action="store_true", help="fail if the page is not up to date"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        current = PAGE.read_text()
        fresh = page(current)
        if options["check"]:
            if fresh != current:
                raise CommandError(f"{PAGE} is out of date: run bin/manage docs_config")
            self.stdout.write(f"{PAGE.name} is up to date ({len(VARIABLES)} variables)")
            return
        if fresh != current:
            PAGE.write_text(fresh)
        self.stdout.write(f"{PAGE.name}: {len(VARIABLES)} variables")
