"""The scheduler process: places pending pods on nodes (logic in ``app.core.scheduling``)."""
