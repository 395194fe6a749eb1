"""gunicorn's settings for contextsvc (gunicorn reads ./gunicorn.conf.py by default).

Command-line flags override these; so does GUNICORN_CMD_ARGS. The variables read
here are declared with the others (contextsvc/variables/, docs/configuration.md).

Why threaded workers: an agent posts every message and fetches the context
before every LLM call, over one keep-alive connection. gunicorn's default
``sync`` worker closes the connection after each response, so every call
paid a new TCP handshake and ~0.5 ms of extra CPU on both sides (measured
with bench/bench_append.py). ``gthread`` keeps connections open and lets a
worker wait on the database for one request while serving another; the
project's worker class is gthread with refused connections held
(contextsvc/gunicorn_worker.py).
"""

import multiprocessing
import os
import socket

from contextsvc.settings_env import env_int, env_str

bind = env_str("GUNICORN_BIND")
# WEB_CONCURRENCY is gunicorn's (and most PaaS') name for the worker count.
workers = env_int("WEB_CONCURRENCY", 2 * multiprocessing.cpu_count())
# gthread, plus one thing: a connection refused with a 429 is left unread for
# its Retry-After (contextsvc/ratelimit/hold.py), so a flooding client that
# ignores it cannot make the worker parse thousands of requests a second.
worker_class = "contextsvc.gunicorn_worker.HoldingThreadWorker"
threads = env_int("GUNICORN_THREADS")
# Agents call again within seconds; keep idle connections that long.
keepalive = env_int("GUNICORN_KEEPALIVE")
# Compaction runs in Celery, not in requests; 120 s covers a large upload.
timeout = env_int("GUNICORN_TIMEOUT")
graceful_timeout = 30
# A connection reaches a worker only once its first bytes (the request line
# and headers) have arrived: gthread hands every new connection to a thread
# that waits up to 5 s for them. A client slow to send — a flood of
# reconnecting uploads from a busy machine — held both threads of a worker
# that way, and the other keys' requests queued behind it (the starvation
# test's calm key: p99 27-79 ms instead of ~10 under a flood of refused
# uploads). Linux only; after this many seconds without data the kernel
# hands the connection over anyway.
DEFER_ACCEPT_SECONDS = env_int("GUNICORN_DEFER_ACCEPT")


def post_fork(server, worker):
    # Before the worker loads Django: contextsvc's per-key limit keeps one of
    # this worker's threads free for another agent key while one is connected
    # (served within the keep-alive; contextsvc/ratelimit/share.py).
    os.environ["CONTEXTSVC_WEB_THREADS"] = str(worker.cfg.threads)
    os.environ["CONTEXTSVC_WEB_KEEPALIVE"] = str(worker.cfg.keepalive)
    defer_accept = getattr(socket, "TCP_DEFER_ACCEPT", None)
    if defer_accept is not None and DEFER_ACCEPT_SECONDS > 0:
        for listener in worker.sockets:
            if listener.family in (socket.AF_INET, socket.AF_INET6):
                listener.setsockopt(socket.IPPROTO_TCP, defer_accept, DEFER_ACCEPT_SECONDS)
