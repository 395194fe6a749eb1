"""The ASGI entry point the proxy process serves (``contextsvc.asgi:application``, uvicorn workers)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "contextsvc.settings")
application = get_asgi_application()
