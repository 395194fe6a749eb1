"""The service's settings for the test suite: a throwaway key and plain HTTP.

The settings refuse to load without a real SECRET_KEY outside DEBUG, and would
redirect the test client's plain-HTTP requests to HTTPS. pytest-django loads
the settings before any conftest runs, so the defaults go in here, as
environment: the gunicorn, celery and manage.py processes tests start inherit
them and load contextsvc.settings itself (whatever their working directory).
"""

import os
import re

os.environ.setdefault("SECRET_KEY", "contextsvc-test-suite-key-" + "k7Qp2xVb9LmZ3rTw8NcY5hJd4" * 2)
os.environ.setdefault("CONTEXTSVC_PLAIN_HTTP", "true")
os.environ["DJANGO_SETTINGS_MODULE"] = "contextsvc.settings"


def _redis_of_this_worker() -> None:
    """Each pytest-xdist worker its own Redis database, as it has its own test
    database: the limits count per agent key id, and two workers' first keys
    share an id; the Celery tests' queues must not be drained by the other."""
    url, worker = os.environ.get("REDIS_URL", ""), os.environ.get("PYTEST_XDIST_WORKER", "")
    match = re.fullmatch(r"(redis://[^/]+)/(\d+)", url)
    if match and worker.startswith("gw"):
        db = (int(match[2]) + 1 + int(worker[2:])) % 16
        os.environ["REDIS_URL"] = f"{match[1]}/{db}"


_redis_of_this_worker()

from contextsvc.settings import *  # noqa: E402,F403

# In-process tests drive one key as fast as the test client goes (hundreds of
# calls in a second): past the burst, pacing would answer them 429. Pacing is
# tested where it is switched on (tests/sessions/test_ratelimit_pacing.py) and
# in the live servers, which load contextsvc.settings with the shipped pace.
CONTEXTSVC_RATE_PACE = "off"

# The recall index's background task after appends: in-process tests have no
# worker (a search or a compaction indexes what it needs); the schedule is
# tested where it is switched on (tests/sessions/test_recall_index_worker.py).
CONTEXTSVC_RECALL_INDEX_DELAY = 0

# The stock PostgreSQL backend, flushed between transactional tests with DELETE
# rather than TRUNCATE (tests/postgresql/base.py says why).
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":  # noqa: F405
    DATABASES = {  # noqa: F405 - a new dict: contextsvc.settings' own stays as it is
        **DATABASES,  # noqa: F405
        "default": {**DATABASES["default"], "ENGINE": "tests.postgresql"},  # noqa: F405
    }

# Passwords hashed in 1,000 rounds, not a million (tests/hashers.py says why).
PASSWORD_HASHERS = ["tests.hashers.FastPBKDF2PasswordHasher"]
