"""The floor for bench_floor.py: a one-file Django application doing the least a
durable, counted append can do — the posted messages INSERTed and the session's
message counter updated, in one PostgreSQL transaction — served by the same
gunicorn (the project's gunicorn.conf.py and worker class).

    gunicorn floor_app:application   (DATABASE_URL set; tables made by bench_floor.py)
"""

from __future__ import annotations

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


@csrf_exempt
def append(request: HttpRequest, sid: str) -> HttpResponse:
    messages = json.loads(request.body)["messages"]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE floor_session SET message_count = message_count + %s WHERE id = %s "
            "RETURNING message_count",
            [len(messages), sid],
        )
        row = cursor.fetchone()
        if row is None:
            return JsonResponse({"error": "no such session"}, status=404)
        first = row[0] - len(messages)
        cursor.executemany(
            "INSERT INTO floor_message (session_id, seq, role, content) VALUES (%s, %s, %s, %s)",
            [(sid, first + i, m["role"], m["content"]) for i, m in enumerate(messages)],
        )
    return JsonResponse({"message_count": row[0], "appended": len(messages)})


urlpatterns = [path("api/v1/sessions/<str:sid>/messages", append)]
application = get_wsgi_application()
