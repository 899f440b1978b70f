"""The REST API server: Kubernetes-style resources under ``quaymaster.io/v1``."""
