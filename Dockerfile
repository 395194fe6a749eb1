# syntax=docker/dockerfile:1
# One image for web (gunicorn) and worker (celery); see docker-compose.yml.

# --- htmx from the npm package htmx.org (the same lock file bin/setup uses) ---
FROM node:20-slim AS htmx
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund --ignore-scripts

# --- the service --------------------------------------------------------------
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CONTEXTSVC_VAR_DIR=/app/var
WORKDIR /app

COPY pyproject.toml manage.py gunicorn.conf.py ./
COPY contextsvc ./contextsvc
COPY sessions ./sessions
COPY compaction ./compaction
COPY prompting ./prompting
COPY proxy ./proxy
COPY templates ./templates
COPY static ./static
RUN pip install .

COPY --from=htmx /src/node_modules/htmx.org/dist/htmx.min.js ./static/vendor/htmx.min.js
RUN python manage.py collectstatic --noinput

RUN useradd --system --uid 10001 --home-dir /app contextsvc \
    && chown -R contextsvc /app/var
USER contextsvc

EXPOSE 8000
# Workers, threads and keep-alive: gunicorn.conf.py (read from /app).
CMD ["gunicorn", "contextsvc.wsgi:application", "--bind", "0.0.0.0:8000"]
