"""Run an API server: ``python -m app.api --host 127.0.0.1 --port 8080``.

With ``--tls-cert-file`` and ``--tls-key-file`` (or ``QM_TLS_CERT_FILE`` / ``QM_TLS_KEY_FILE``)
it serves HTTPS only, as ``make up`` runs it (ADR 0050).
"""

from __future__ import annotations

import argparse
import os

import uvicorn

from app.process import configure_logging
from app.store.db import database_url
from app.store.schema_revision import require_known_schema


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m app.api")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("QM_API_PORT", "8080")))
    parser.add_argument("--log-level", default=os.environ.get("QM_LOG_LEVEL", "warning"))
    parser.add_argument("--tls-cert-file", default=os.environ.get("QM_TLS_CERT_FILE") or None)
    parser.add_argument("--tls-key-file", default=os.environ.get("QM_TLS_KEY_FILE") or None)
    args = parser.parse_args()
    if (args.tls_cert_file is None) != (args.tls_key_file is None):
        parser.error("--tls-cert-file and --tls-key-file go together")
    configure_logging(args.log_level)  # uvicorn turns SIGTERM and SIGINT into its shutdown
    require_known_schema(database_url(), "the API server")
    uvicorn.run(
        "app.api.app:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        lifespan="on",
        timeout_graceful_shutdown=5,
        ssl_certfile=args.tls_cert_file,
        ssl_keyfile=args.tls_key_file,
    )


if __name__ == "__main__":
    main()
