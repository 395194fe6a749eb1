"""The WSGI entry point gunicorn serves (``contextsvc.wsgi:application``).

Django, behind a wrapper that refuses a known-flooding agent key before Django
sees the request or its body (``contextsvc/ratelimit/wsgi.py``).
"""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "contextsvc.settings")
django_application = get_wsgi_application()

from contextsvc.ratelimit.wsgi import RefuseFloodingKeys  # noqa: E402  (needs settings)
from sessions.auth import key_identity  # noqa: E402

application = RefuseFloodingKeys(django_application, key_identity)
