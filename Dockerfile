# syntax=docker/dockerfile:1
#
# One image for every Quaymaster process: api, scheduler, Celery workers and
# beat, agent, and the migration job. docker-compose.yml picks the command.
# The first stage builds the PgBouncer image the compose file puts in front
# of PostgreSQL; `docker build .` builds the last stage, the application.

FROM debian:trixie-slim AS pgbouncer
RUN apt-get update \
 && apt-get install -y --no-install-recommends pgbouncer postgresql-client \
 && rm -rf /var/lib/apt/lists/*
# PgBouncer refuses to run as root.
USER postgres
EXPOSE 6432
CMD ["pgbouncer", "/etc/pgbouncer/pgbouncer.ini"]


FROM python:3.11-slim AS app
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# runc: the agent runs containers with it.
RUN apt-get update \
 && apt-get install -y --no-install-recommends runc \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --user-group --home-dir /srv/quaymaster --shell /usr/sbin/nologin quaymaster
WORKDIR /srv/quaymaster
COPY pyproject.toml alembic.ini ./
COPY app ./app
COPY workers ./workers
COPY agent ./agent
COPY migrations ./migrations
RUN pip install . && chown -R quaymaster:quaymaster /srv/quaymaster
USER quaymaster
EXPOSE 8080
CMD ["python", "-m", "app.api", "--host", "0.0.0.0", "--port", "8080"]
