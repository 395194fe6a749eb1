"""manage.py count_estimated_tokens: exact token counts for estimates whose task never ran."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from sessions.services.exact_counts import estimated_counts_sweep


class Command(BaseCommand):
    help = (
        "Count exactly the messages an append stored with a bounded estimate and whose "
        "exact count never ran (e.g. the broker was down), older than --older-than-seconds."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--older-than-seconds", type=int, default=300)
        parser.add_argument("--limit", type=int, default=1000)

    def handle(self, *args: Any, older_than_seconds: int, limit: int, **options: Any) -> None:
        counted = estimated_counts_sweep(older_than_seconds=older_than_seconds, limit=limit)
        self.stdout.write(f"Counted {counted} estimated message(s) exactly")
