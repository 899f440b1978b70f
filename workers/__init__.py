"""Controllers run as Celery workers (the controller runtime lands here)."""
