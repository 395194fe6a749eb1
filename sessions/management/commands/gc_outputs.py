"""manage.py gc_outputs [--dry-run] [--older-than-days N]
(docs/concepts/trimming.md#garbage-collection)."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from sessions.outputs.gc import outputs_gc


class Command(BaseCommand):
    help = (
        "Delete stored tool outputs that no live message, retained summary or snapshot "
        "references and that were not used for --older-than-days "
        "(default CONTEXTSVC_OUTPUT_RETENTION_DAYS)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="List what would be deleted; delete nothing"
        )
        parser.add_argument(
            "--older-than-days",
            type=int,
            default=None,
            help=f"Retention in days (default {settings.CONTEXTSVC_OUTPUT_RETENTION_DAYS})",
        )

    def handle(self, *args, dry_run: bool, older_than_days: int | None, **options) -> None:
        if older_than_days is not None and older_than_days < 0:
            self.stderr.write("--older-than-days must not be negative")
            raise SystemExit(2)
        result = outputs_gc(older_than_days=older_than_days, dry_run=dry_run)
        verb = "Would delete" if dry_run else "Deleted"
        for row in result["outputs"]:
            self.stdout.write(
                f"{verb} {row['ref']} ({row['byte_size']:,} bytes, {row['tool_name'] or '-'}, "
                f"last used {row['last_used_at']})"
            )
        self.stdout.write(
            f"{verb} {result['count']} output(s), {result['bytes']:,} bytes; "
            f"kept {result['kept_referenced']} still referenced (cutoff {result['cutoff']})"
        )
