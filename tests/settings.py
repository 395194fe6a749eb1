"""The service's settings for the test suite: a throwaway key and plain HTTP.

The settings refuse to load without a real SECRET_KEY outside DEBUG, and would
redirect the test client's plain-HTTP requests to HTTPS. pytest-django loads
the settings before any conftest runs, so the defaults go in here; being
os.environ, they also reach the gunicorn and celery processes tests start.
"""

import os

os.environ.setdefault("SECRET_KEY", "contextsvc-test-suite-key-" + "k7Qp2xVb9LmZ3rTw8NcY5hJd4" * 2)
os.environ.setdefault("CONTEXTSVC_PLAIN_HTTP", "true")

from contextsvc.settings import *  # noqa: E402,F403
