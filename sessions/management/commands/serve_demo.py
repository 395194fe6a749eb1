"""bin/run's web server: runserver that first brings the database up to date and
the demo in place, in the same process, and ends with the demo's banner.

One Python start instead of two (a separate ``migrate`` paid Django's start-up
again: seconds on a busy machine). Migrations run only when the plan is not
empty, and quietly. ``--migrated`` (bin/run: the migration files are those of
the last start on this database) skips even the plan (a quarter of a second of
loading every migration module): the demo's first query then finds out, and a
database without the tables is migrated after all. The demo is made only when
absent; the URL conf is loaded
before the socket opens, so the banner appears when the first request can be
answered at once. The banner (sessions/services/demo.py) replaces runserver's
own, so the key, the login and the ready curl are the last lines on the screen.
"""

from __future__ import annotations

from django.contrib.staticfiles.management.commands.runserver import (
    Command as StaticRunserverCommand,
)
from django.core.management import call_command
from django.core.management.base import CommandParser
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.urls import get_resolver

from sessions.services.demo import Demo, demo_banner, demo_seed


class Command(StaticRunserverCommand):
    help = "Migrate when needed, seed the demo when absent, then serve (bin/run)."
    demo: Demo | None = None
    migrated = False

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument(
            "--migrated",
            action="store_true",
            help="skip the migration plan unless tables are missing",
        )

    def handle(self, *args: object, **options: object) -> None:
        self.migrated = bool(options["migrated"])
        super().handle(*args, **options)

    def migrate(self) -> None:
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
        if plan:
            self.stdout.write(f"run: applying {len(plan)} migrations")
            call_command("migrate", interactive=False, verbosity=0)

    def check_migrations(self) -> None:
        # runserver calls this once, before it binds: here it migrates instead of warning.
        if not self.migrated:
            self.migrate()
        try:
            self.demo = demo_seed()
        except DatabaseError:
            if not self.migrated:
                raise
            self.migrate()  # the database was replaced since the last start
            self.demo = demo_seed()
        get_resolver().url_patterns  # noqa: B018 - import the views now, not in the first request

    def on_bind(self, server_port: int) -> None:
        if self.demo is not None:
            self.stdout.write(demo_banner(self.demo))
