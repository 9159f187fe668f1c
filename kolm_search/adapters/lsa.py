"""``LSAEmbedder``: latent semantic analysis (Deerwester et al., JASIS 1990) fitted on a corpus.

TF-IDF (sublinear tf, smoothed idf, the BM25 tokenizer) reduced by a truncated SVD
(``scipy.sparse.linalg.svds``); queries are folded in by the same projection. No model
download, deterministic for a given corpus and seed: a dense embedder that always works
offline, and a classic baseline for hybrid retrieval.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from kolm_search.engine.text import Tokenizer
from kolm_search.errors import KolmValueError

__all__ = ["LSAEmbedder"]


class LSAEmbedder:
    """Dense embeddings by truncated SVD of the corpus' TF-IDF matrix.

    Parameters
    ----------
    corpus : sequence of str
        Texts to fit on (typically the documents' title + content).
    n_components : int, default 256
        Dimensions (capped below the matrix rank).
    tokenizer : Tokenizer, optional
    seed : int, default 0
        Seeds the SVD's start vector (``numpy.random.Generator``).

    Example
    -------
    >>> emb = LSAEmbedder(["a cat sat", "a dog ran", "cats and dogs"], n_components=2)
    >>> emb.embed_many(["cat"]).shape
    (1, 2)
    """

    def __init__(self, corpus: Sequence[str], n_components: int = 256, *, tokenizer: Tokenizer | None = None,
                 seed: int = 0) -> None:
        from scipy.sparse.linalg import svds

        if len(corpus) < 2:
            raise KolmValueError("LSAEmbedder needs at least two texts to fit on")
        self.tokenizer = tokenizer or Tokenizer()
        self.vocab: dict[str, int] = {}
        mat = self._counts(corpus, grow=True)
        n_docs = mat.shape[0]
        df = np.bincount(mat.indices, minlength=len(self.vocab))
        self.idf = (np.log((1.0 + n_docs) / (1.0 + df)) + 1.0).astype(np.float64)
        x = self._weight(mat)
        k = int(max(1, min(n_components, min(x.shape) - 1)))
        rng = np.random.default_rng(seed)
        _, s, vt = svds(x.astype(np.float64), k=k, v0=rng.random(min(x.shape)))
        order = np.argsort(-s)
        self.components = np.ascontiguousarray((vt[order] / s[order, None]).T.astype(np.float32))  # (V, k)
        self.dim = k

    def _counts(self, texts: Sequence[str], *, grow: bool) -> sp.csr_matrix:
        indptr, indices = [0], []
        for text in texts:
            for tok in self.tokenizer(text):
                idx = self.vocab.get(tok)
                if idx is None and grow:
                    idx = self.vocab[tok] = len(self.vocab)
                if idx is not None:
                    indices.append(idx)
            indptr.append(len(indices))
        data = np.ones(len(indices), np.float64)
        mat = sp.csr_matrix((data, np.asarray(indices, np.int64), np.asarray(indptr, np.int64)),
                            shape=(len(texts), max(len(self.vocab), 1)))
        mat.sum_duplicates()
        return mat

    def _weight(self, counts: sp.csr_matrix) -> sp.csr_matrix:
        x = counts.copy()
        x.data = 1.0 + np.log(x.data)
        x = x.multiply(self.idf[None, : x.shape[1]]).tocsr()
        norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
        norms[norms == 0] = 1.0
        return sp.diags(1.0 / norms) @ x

    def embed_many(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embeddings: float32 (n, dim), L2-normalised (a text with no known token gives zeros)."""
        x = self._weight(self._counts(list(texts), grow=False))
        out = np.asarray(x @ self.components, dtype=np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return (out / np.where(norms > 0, norms, 1.0)).astype(np.float32)

    def embed(self, text: str) -> npt.NDArray[np.float32]:
        """Embedding of one text: float32 (dim,)."""
        return self.embed_many([text])[0]

    def fingerprint(self) -> str:
        """What the embeddings depend on: the tokenizer, the vocabulary and the fitted arrays
        (:class:`~kolm_search.contract.ports.Fingerprinted`)."""
        from kolm_search.adapters._fingerprint import array_digest, describe, text_digest

        t = self.tokenizer
        stop = t.stopwords if t.stopwords is None or isinstance(t.stopwords, str) else sorted(t.stopwords)
        tokenizer = text_digest(repr((t.lowercase, t.pattern, stop, t.stemmer, t.language)))
        return describe("LSAEmbedder", dim=self.dim, tokenizer=tokenizer, vocab=text_digest("\x00".join(self.vocab)),
                        weights=array_digest(self.idf, self.components))

    def __repr__(self) -> str:
        return f"LSAEmbedder(dim={self.dim}, vocab={len(self.vocab)})"
