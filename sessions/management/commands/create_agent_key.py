from django.core.management.base import BaseCommand

from sessions.services import agent_key_create


class Command(BaseCommand):
    help = "Create an agent API key. The key is printed once, alone on the last line."

    def add_arguments(self, parser):
        parser.add_argument("name", help="Agent name (shown in the dashboard)")

    def handle(self, *args, name: str, **options):
        key, raw = agent_key_create(name=name)
        self.stderr.write(f"Created key #{key.pk} for {key.name!r}; store it now, it is not kept:")
        self.stdout.write(raw)
