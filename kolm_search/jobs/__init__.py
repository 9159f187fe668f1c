"""Long jobs written as parts: batch re-ranking (``rerank_run``) and its plan."""
