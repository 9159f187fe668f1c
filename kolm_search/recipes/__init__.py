"""Clients assembled of the built-in parts: ``presets`` (ready clients) and ``client_store``
(a saved client read back into them)."""
