"""Adapters for the ports that need third-party packages (each behind an optional extra)."""

from kolm_search.adapters.embedders import SentenceTransformerEmbedder, packaged_minilm_path

__all__ = ["SentenceTransformerEmbedder", "packaged_minilm_path"]
