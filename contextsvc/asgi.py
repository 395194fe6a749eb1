"""The ASGI entry point the proxy process serves (``contextsvc.asgi:application``, uvicorn workers)."""

import gc
import os

from django.conf import settings
from django.core.asgi import get_asgi_application

from contextsvc.settings_env import env_str

# A proxy process starting fresh takes the project's settings narrowed to the
# proxy (contextsvc/settings_proxy.py). The package's Celery app has already
# set the default module by now, so that default counts as "not chosen"; any
# other module named explicitly, or settings already loaded (the tests'
# in-process application), are left as they are.
if not settings.configured and (env_str("DJANGO_SETTINGS_MODULE") == "contextsvc.settings"):
    os.environ["DJANGO_SETTINGS_MODULE"] = "contextsvc.settings_proxy"
application = get_asgi_application()

# Imported once Django is set up; proxy bodies over the size limit are refused
# in front of Django, before they are read (proxy.gate).
from proxy.gate import limit_bodies  # noqa: E402

application = limit_bodies(application)

# Every proxied call builds the whole managed body (a few dicts per message);
# what survives a young collection is promoted, and the full collections that
# follow scanned every object Django and the libraries made at start-up: at
# 2,000 messages that was two thirds of the build's CPU. Frozen, those objects
# are never scanned again (they live as long as the process anyway).
gc.freeze()
