"""Shared by the index reliability tests: small saved indexes, and a runner that loads and
searches many of them in child processes (:mod:`tests.reliability.index_child`)."""

from __future__ import annotations

import hashlib
import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kolm_search import BM25Retriever, Tokenizer
from kolm_search.retrievers.dense import DenseRetriever
from tests.conftest import synthetic_corpus

ROOT = Path(__file__).resolve().parents[2]
N_DOCS, DIM, K = 40, 8, 7
QUERIES = ["w1 w2", "", "zz", "w3", "w5 w5 w9 w0", "w7 w11 w13 w2"]  # a last query without terms: h16-batch
KIND = {"bm25plus": "bm25", "lucene": "bm25", "cosine": "dense", "ip": "dense"}


def build_indexes(root: Path) -> dict[str, Path]:
    """BM25+ and Lucene BM25 indexes, cosine and inner-product dense indexes, saved under ``root``."""
    texts = synthetic_corpus(N_DOCS, 30, 0)
    frame = pd.DataFrame({"id": [f"d{i}" for i in range(N_DOCS)], "content": texts,
                          "title": [f"title w{i % 7}" for i in range(N_DOCS)],
                          "source": [f"s{i % 3}" for i in range(N_DOCS)], "year": list(range(N_DOCS))})
    BM25Retriever(frame, method="bm25+", tokenizer=Tokenizer(stopwords=["w0"])).save(root / "bm25plus")
    BM25Retriever(frame, method="lucene", tokenizer=Tokenizer(stemmer=None), fields=("content",)).save(root / "lucene")
    emb = np.random.default_rng(0).standard_normal((N_DOCS, DIM)).astype(np.float32)
    emb[3] = 0  # a zero row
    DenseRetriever(frame, embeddings=emb).save(root / "cosine")
    DenseRetriever(frame, embeddings=emb, metric="ip").save(root / "ip")
    return {name: root / name for name in KIND}


def file_of(d: Path, key: str) -> Path:
    """The file of ``key`` (``"t_w"``, ``"documents"``; ``"0.t_w"`` in a child) that the manifest
    of the saved index ``d`` names."""
    body = json.loads((d / "manifest.json").read_text())
    *path, last = key.split(".")
    for i in path:
        body = body["children"][int(i)]
    if "files" not in body:  # a format before file maps: fixed names
        ext = {"documents": "parquet", "vocab": "json"}.get(last, "npy")
        return d / f"{last}.{ext}"
    return d / body["files"][last]["name"]


def save_synthetic_bm25(root: Path, n_docs: int, vocab: int, seed: int) -> Path:
    """A BM25+ index of ``n_docs`` synthetic documents (words ``w0..w{vocab-1}``) saved in ``root``."""
    texts = synthetic_corpus(n_docs, vocab, seed=seed)
    BM25Retriever([{"id": f"d{i}", "content": t} for i, t in enumerate(texts)], method="bm25+").save(root)
    return root


def load_and_read(d: Path, verify: str = "auto", **kwargs: Any) -> BM25Retriever:
    """The BM25 index in ``d`` loaded with ``verify`` and, loaded quickly, searched for every
    term once, one query per term: a quick load checks each term's postings and bounds when a
    search first reads them (:mod:`kolm_search.retrievers.postings_gate`), so its errors come
    from that search, where a full load's come from the load."""
    ret = BM25Retriever.load(d, verify=verify, **kwargs)  # type: ignore[arg-type]
    n = len(ret.vocab)
    ret.score_encoded(np.arange(n + 1, dtype=np.int64), np.arange(n, dtype=np.int64), 1)
    return ret


def _entries(body: dict[str, Any]) -> list[dict[str, Any]]:
    out = list(body.get("files", {}).values())
    for child in body.get("children", []):
        out += _entries(child)
    return out


def reseal(d: Path) -> None:
    """Record in the manifest of ``d`` the size and sha256 of every file it names, as they are now
    (what someone who edits the files and the manifest does): the checks of what the files mean,
    not the digests, must then refuse the damage."""
    path = d / "manifest.json"
    body = json.loads(path.read_text())
    for entry in _entries(body):
        f = d / entry["name"]
        if f.is_file():
            data = f.read_bytes()
            entry["bytes"], entry["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    path.write_text(json.dumps(body))


def as_legacy(d: Path, version: int) -> None:
    """Rewrite the saved BM25 (``version`` 1 or 2) or dense (1) index ``d`` in its format before
    file maps: fixed names (``t_w.npy``), no ``generation`` or ``files``; version 1 of BM25 without
    ``stats`` and term frequencies."""
    documents_as_parquet(d)
    path = d / "manifest.json"
    body = json.loads(path.read_text())
    for key, entry in body.pop("files").items():
        ext = entry["name"].rsplit(".", 1)[1]
        (d / entry["name"]).rename(d / f"{key}.{ext}")
    del body["generation"]
    body["version"] = version
    if body["format"] == "kolm-search/bm25":  # term maxima came with version 4, block maxima with 6
        (d / "term_max.npy").unlink()
        (d / "block_max.npy").unlink()
    if version == 1 and body["format"] == "kolm-search/bm25":
        body.pop("stats")
        (d / "tf.npy").unlink(missing_ok=True)
    path.write_text(json.dumps(body))


def documents_as_parquet(d: Path, version: int | None = None) -> None:
    """Rewrite the documents file of the saved index ``d`` (top level) as the parquet table that
    format versions before documents files held (BM25 4, dense 2), resealed; ``version`` sets
    the manifest's."""
    from kolm_search.engine.mapped_table import MappedDocumentTable

    path = d / "manifest.json"
    body = json.loads(path.read_text())
    entry = body["files"]["documents"]
    old = d / entry["name"]
    new = old.with_suffix(".parquet")
    MappedDocumentTable(old).save(new)
    old.unlink()
    entry["name"] = new.name
    if version is not None:
        body["version"] = version
        if body["format"] == "kolm-search/bm25" and version < 6:  # block maxima came with version 6
            (d / body["files"].pop("block_max")["name"]).unlink()
    path.write_text(json.dumps(body))
    reseal(d)


def case(path: Path, kind: str, verify: str = "auto") -> dict[str, Any]:
    vectors = np.random.default_rng(1).standard_normal((4, DIM)).round(3).tolist()
    return {"kind": kind, "dir": str(path), "queries": QUERIES, "vectors": vectors, "k": K, "verify": verify}


def _pump(stream: Any, out: queue.Queue[str | None]) -> None:
    for line in stream:
        out.put(line)
    out.put(None)


def run_cases(cases: list[dict[str, Any]], *, first_deadline: float = 120.0, deadline: float = 20.0,
              ) -> list[dict[str, Any]]:
    """One record per case from child processes; a crash or hang is the record of its case."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    records: list[dict[str, Any]] = []
    while len(records) < len(cases):
        proc = subprocess.Popen([sys.executable, "-m", "tests.reliability.index_child"], cwd=ROOT, env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines: queue.Queue[str | None] = queue.Queue()
        errors: list[str] = []
        threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
        threading.Thread(target=errors.extend, args=(proc.stderr,), daemon=True).start()
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(cases[len(records):]))
        proc.stdin.close()
        wait = first_deadline
        while len(records) < len(cases):
            try:
                line = lines.get(timeout=wait)
            except queue.Empty:
                proc.kill()
                records.append({"status": "hang", "error": f"no answer within {wait:g} s"})
                break
            if line is None:
                rc = proc.wait(timeout=30)
                records.append({"status": "crash", "error": f"child exited with {rc}: {''.join(errors)[-3000:]}"})
                break
            records.append(json.loads(line))
            wait = deadline
        proc.wait(timeout=30)
        if len(records) == len(cases) and proc.returncode != 0:
            records[-1] = {"status": "crash", "error": f"child exited with {proc.returncode}"}
    return records


def key_paths(obj: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.append((*prefix, k))
            out.extend(key_paths(v, (*prefix, k)))
    return out
