"""Run an API server: ``python -m app.api --host 127.0.0.1 --port 8080``."""

from __future__ import annotations

import argparse
import os

import uvicorn

from app.process import configure_logging


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m app.api")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("QM_API_PORT", "8080")))
    parser.add_argument("--log-level", default=os.environ.get("QM_LOG_LEVEL", "warning"))
    args = parser.parse_args()
    configure_logging(args.log_level)  # uvicorn turns SIGTERM and SIGINT into its shutdown
    uvicorn.run(
        "app.api.app:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )


if __name__ == "__main__":
    main()
