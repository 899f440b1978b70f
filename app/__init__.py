"""Quaymaster: a container orchestrator control plane whose whole state lives in PostgreSQL."""

__version__ = "0.1.0"
