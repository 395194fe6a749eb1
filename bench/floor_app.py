"""The floor for bench_floor.py: a one-file Django application doing the least a
durable, counted append can do — the bearer key looked up by its SHA-256, each
message's tokens counted with the same tokenizer and rule as contextsvc
(``estimate_text`` + the per-message overhead), the messages INSERTed with
their counts and the session's message and token counters updated, in one
PostgreSQL transaction, the session checked to belong to the key — served by
the same gunicorn (the project's gunicorn.conf.py and worker class).

    gunicorn floor_app:application   (DATABASE_URL set; tables made by bench_floor.py)
"""

from __future__ import annotations

import hashlib
import json
import os
from urllib.parse import urlparse

from django.conf import settings

_db = urlparse(os.environ["DATABASE_URL"])
settings.configure(
    DEBUG=False,
    SECRET_KEY="floor-bench",
    ALLOWED_HOSTS=["*"],
    ROOT_URLCONF=__name__,
    MIDDLEWARE=[],
    INSTALLED_APPS=[],
    DATABASES={
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": _db.path.lstrip("/"),
            "USER": _db.username or "",
            "PASSWORD": _db.password or "",
            "HOST": _db.hostname or "",
            "PORT": _db.port or "",
            "CONN_MAX_AGE": None,  # as the project: one connection per thread, kept
        }
    },
)

from django.core.wsgi import get_wsgi_application  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.http import HttpRequest, HttpResponse, JsonResponse  # noqa: E402
from django.urls import path  # noqa: E402
from django.views.decorators.csrf import csrf_exempt  # noqa: E402

from contextsvc.engine.tokens import estimate_text, get_tokenizer  # noqa: E402

TOKENIZER = get_tokenizer("tiktoken:cl100k_base")  # the seeded models' tokenizer
PER_MESSAGE = 4  # the per-message overhead of the estimate


@csrf_exempt
def append(request: HttpRequest, sid: str) -> HttpResponse:
    token = request.headers.get("Authorization", "").removeprefix("Bearer ")
    digest = hashlib.sha256(token.encode()).hexdigest()
    messages = json.loads(request.body)["messages"]
    counts = [estimate_text(m["content"], TOKENIZER) + PER_MESSAGE for m in messages]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE floor_session SET message_count = message_count + %s, tokens = tokens + %s "
            "WHERE id = %s AND key_hash = %s RETURNING message_count, tokens",
            [len(messages), sum(counts), sid, digest],
        )
        row = cursor.fetchone()
        if row is None:
            return JsonResponse({"error": "no such session for this key"}, status=404)
        first = row[0] - len(messages)
        cursor.executemany(
            "INSERT INTO floor_message (session_id, seq, role, content, tokens) "
            "VALUES (%s, %s, %s, %s, %s)",
            [
                (sid, first + i, m["role"], m["content"], n)
                for i, (m, n) in enumerate(zip(messages, counts, strict=True))
            ],
        )
    return JsonResponse({"message_count": row[0], "tokens": row[1], "appended": len(messages)})


urlpatterns = [path("api/v1/sessions/<str:sid>/messages", append)]
application = get_wsgi_application()
