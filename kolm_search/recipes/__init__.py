"""Clients assembled of the built-in parts: ``presets`` (ready clients)."""
