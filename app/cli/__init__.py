"""The ``qm`` command line: a kubectl-style client for the Quaymaster REST API."""
