"""The WSGI entry point gunicorn serves (``contextsvc.wsgi:application``)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "contextsvc.settings")
application = get_wsgi_application()
