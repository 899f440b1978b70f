"""The store layer: conditional reads and writes of kind tables, shared by the API and the
internal components (scheduler, controllers), so the version rules live in one place."""
