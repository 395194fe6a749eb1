"""manage.py prune_idempotency_keys: delete Idempotency-Key records past their retention."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from sessions.services.idempotency import idempotency_prune


class Command(BaseCommand):
    help = "Delete Idempotency-Key records older than CONTEXTSVC_IDEMPOTENCY_TTL_HOURS (or --older-than-hours)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--older-than-hours", type=int, default=None)

    def handle(self, *args: Any, older_than_hours: int | None, **options: Any) -> None:
        deleted = idempotency_prune(older_than_hours=older_than_hours)
        self.stdout.write(f"Deleted {deleted} idempotency record(s)")
