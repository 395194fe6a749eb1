"""The ASGI entry point the proxy process serves (``contextsvc.asgi:application``, uvicorn workers)."""

import os

from django.conf import settings
from django.core.asgi import get_asgi_application

# A proxy process starting fresh takes the project's settings narrowed to the
# proxy (contextsvc/settings_proxy.py). The package's Celery app has already
# set the default module by now, so that default counts as "not chosen"; any
# other module named explicitly, or settings already loaded (the tests'
# in-process application), are left as they are.
if not settings.configured and (
    os.environ.get("DJANGO_SETTINGS_MODULE", "contextsvc.settings") == "contextsvc.settings"
):
    os.environ["DJANGO_SETTINGS_MODULE"] = "contextsvc.settings_proxy"
application = get_asgi_application()
