"""gunicorn's settings for contextsvc (gunicorn reads ./gunicorn.conf.py by default).

Command-line flags override these; so does GUNICORN_CMD_ARGS.

Why threaded workers: an agent posts every message and fetches the context
before every LLM call, over one keep-alive connection. gunicorn's default
``sync`` worker closes the connection after each response, so every call
paid a new TCP handshake and ~0.5 ms of extra CPU on both sides (measured
with bench/bench_append.py). ``gthread`` keeps connections open and lets a
worker wait on the database for one request while serving another.
"""

import multiprocessing
import os

bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
# WEB_CONCURRENCY is gunicorn's (and most PaaS') name for the worker count.
workers = int(os.environ.get("WEB_CONCURRENCY", 2 * multiprocessing.cpu_count()))
worker_class = "gthread"
threads = int(os.environ.get("GUNICORN_THREADS", "2"))
# Agents call again within seconds; keep idle connections that long.
keepalive = int(os.environ.get("GUNICORN_KEEPALIVE", "15"))
# Compaction runs in Celery, not in requests; 120 s covers a large upload.
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "120"))
graceful_timeout = 30


def post_fork(server, worker):
    # Before the worker loads Django: contextsvc's per-key limit keeps one of
    # this worker's threads free for other agent keys (contextsvc/ratelimit/).
    os.environ["CONTEXTSVC_WEB_THREADS"] = str(worker.cfg.threads)
