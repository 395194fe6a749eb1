from django.core.management.base import BaseCommand

from sessions.services import idempotency_prune


class Command(BaseCommand):
    help = "Delete Idempotency-Key records older than CONTEXTSVC_IDEMPOTENCY_TTL_HOURS (or --older-than-hours)."

    def add_arguments(self, parser):
        parser.add_argument("--older-than-hours", type=int, default=None)

    def handle(self, *args, older_than_hours: int | None, **options):
        deleted = idempotency_prune(older_than_hours=older_than_hours)
        self.stdout.write(f"Deleted {deleted} idempotency record(s)")
