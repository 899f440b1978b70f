"""The UI's pages, one module per section; each exports ``HANDLERS``."""
