"""The scheduler process: places pending pods on nodes (see ``app.core.scheduling`` for the logic)."""
