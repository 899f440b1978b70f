"""Local servers for development and tests: PostgreSQL, Redis and the ``make up`` stack.

Nothing here runs in production; it exists so that a developer, a test run and
CI get real PostgreSQL (with logical replication) and Redis servers from Python
wheels alone, with no system packages or containers.
"""
