"""Adapters for the ports that need third-party packages (each behind an optional extra)."""

from kolm_search.adapters.embedders import SentenceTransformerEmbedder, packaged_minilm_path
from kolm_search.adapters.lsa import LSAEmbedder

__all__ = ["LSAEmbedder", "SentenceTransformerEmbedder", "packaged_minilm_path"]
