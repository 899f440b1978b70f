"""The pure core: data rules with no I/O (no database, web framework or task queue imports)."""
