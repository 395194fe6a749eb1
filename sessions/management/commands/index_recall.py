"""manage.py index_recall: bring the recall index (history_search) of recent sessions up to date."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from sessions.recall.index import recall_index_sweep


class Command(BaseCommand):
    help = (
        "Index what sessions updated in the last --max-age-hours appended since their recall "
        "index last ran (a search does this for its own session; this is the periodic sweep)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--max-age-hours", type=int, default=48)

    def handle(self, *args: Any, max_age_hours: int, **options: Any) -> None:
        written = recall_index_sweep(max_age_hours=max_age_hours)
        self.stdout.write(f"Wrote {written} recall segment(s)")
