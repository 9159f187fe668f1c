"""Saved indexes: one test per defect class of issue 16 (item 4), each asserting the exact error
type and a message naming the file and the key, array or position; and atomic saves.

On the code before the fix these loaded and then crashed (a pointer past the postings: SIGSEGV in
the search kernel), answered wrongly (negative or unordered document rows, NaN weights or
embeddings, an unknown metric) or raised bare ``KeyError``/``TypeError``/``JSONDecodeError``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kolm_search import BM25Retriever, KolmValueError
from kolm_search.retrievers.dense import DenseRetriever
from tests.reliability.indexes import (
    KIND,
    N_DOCS,
    ROOT,
    build_indexes,
    case,
    file_of,
    key_paths,
    load_and_read,
    reseal,
    run_cases,
)

G = r"\.[0-9a-f]{32}"  # the generation in a file name: t_w.<generation>.npy


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_indexes(tmp_path_factory.mktemp("pristine"))


def _copy(pristine: dict[str, Path], name: str, tmp_path: Path) -> Path:
    d = tmp_path / name
    shutil.copytree(pristine[name], d)
    return d


def _edit_npy(d: Path, key: str, edit: Callable[[np.ndarray], Any]) -> None:
    """Edit the array ``key`` of index ``d`` and record its new digest in the manifest: the
    checks of what the arrays mean must refuse it (the digest check alone is tested apart)."""
    path = file_of(d, key)
    a = np.load(path).copy()
    edit(a)
    np.save(path, a)
    reseal(d)


def _edit_json(path: Path, edit: Callable[[Any], Any]) -> None:
    body = json.loads(path.read_text())
    edit(body)
    path.write_text(json.dumps(body))


@pytest.fixture(params=["auto", "quick"])
def verify(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How the load checks: in full (``"auto"``: these indexes are small), or quickly, reading
    the large arrays in blocks of 64 bytes (many blocks, on threads)."""
    from kolm_search.retrievers import _blocks

    monkeypatch.setattr(_blocks, "BLOCK_BYTES", 64)
    return str(request.param)


def _load(d: Path, **kwargs: Any) -> Any:
    fmt = json.loads((d / "manifest.json").read_text()).get("format")
    return (DenseRetriever if fmt == "kolm-search/dense" else BM25Retriever).load(d, **kwargs)


def test_altered_pointers_never_reach_the_kernel(pristine: dict[str, Path], tmp_path: Path) -> None:
    """Today's SIGSEGV (a pointer past the postings, every size check passing) and its relatives,
    loaded and searched in a child process: each is a clear error at load."""
    edits: list[Callable[[np.ndarray], Any]] = [
        lambda a: a.__setitem__(5, 10**12), lambda a: a.__setitem__(5, -(10**12)),
        lambda a: a.__setitem__(5, a[-1]), lambda a: a.__setitem__(0, 3)]
    dirs = []
    for i, edit in enumerate(edits):
        d = tmp_path / f"p{i}"
        shutil.copytree(pristine["bm25plus"], d)
        _edit_npy(d, "t_ptr", edit)
        dirs.append(d)
    d = tmp_path / "docs"
    shutil.copytree(pristine["bm25plus"], d)
    _edit_npy(d, "t_docs", lambda a: a.__setitem__(0, -(2**31)))
    dirs.append(d)
    records = run_cases([case(d, "bm25") for d in dirs])
    assert [r["status"] for r in records] == ["kolm"] * len(dirs), records
    assert all(r["type"] == "KolmValueError" and (file_of(d, "t_ptr").name in r["error"] or
                                                  file_of(d, "t_docs").name in r["error"])
               for r, d in zip(records, dirs, strict=True)), records


def test_decreasing_pointers(pristine: dict[str, Path], tmp_path: Path, verify: str) -> None:
    d = _copy(pristine, "bm25plus", tmp_path)
    _edit_npy(d, "t_ptr", lambda a: a.__setitem__([5, 6], a[[6, 5]]))  # in range, ends intact
    with pytest.raises(KolmValueError, match=rf"t_ptr{G}\.npy: pointers decrease at position 6 "):
        BM25Retriever.load(d, verify=verify)


@pytest.mark.parametrize("value", [-1, -(2**31), N_DOCS, 2**31 - 1])
def test_document_ids_out_of_range(pristine: dict[str, Path], tmp_path: Path, value: int, verify: str) -> None:
    d = _copy(pristine, "lucene", tmp_path)
    _edit_npy(d, "t_docs", lambda a: a.__setitem__(9, value))
    with pytest.raises(KolmValueError, match=rf"t_docs{G}\.npy: document row {value} at position 9 lies outside \[0, {N_DOCS}\)"):
        load_and_read(d, verify)  # quickly: at the first search of the term


def test_unordered_document_ids_within_a_term(pristine: dict[str, Path], tmp_path: Path, verify: str) -> None:
    d = _copy(pristine, "lucene", tmp_path)
    _edit_npy(d, "t_docs", lambda a: a.__setitem__(2, a[1]))  # a duplicate within term 0 (df >= 3)
    with pytest.raises(KolmValueError, match=rf"t_docs{G}\.npy: document rows not ascending within a term at position 2"):
        load_and_read(d, verify)  # quickly: at the first search of the term


@pytest.mark.parametrize("name, value, shown", [("t_w", np.nan, "nan"), ("t_w", -np.inf, "-inf"),
                                                 ("nonocc", np.inf, "inf"), ("t_w", -1.0, "-1.0")])
def test_non_finite_or_negative_weights(pristine: dict[str, Path], tmp_path: Path, name: str, value: float,
                                        shown: str, verify: str) -> None:
    d = _copy(pristine, "bm25plus", tmp_path)
    _edit_npy(d, name, lambda a: a.__setitem__(3, value))
    with pytest.raises(KolmValueError, match=rf"{name}{G}\.npy: value at position 3 is {shown}; values must be"):
        load_and_read(d, verify)  # quickly: at the first search of the term


_MAXIMA_DAMAGE: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "one ulp low": lambda a: np.where(np.arange(len(a)) == np.argmax(a), np.nextafter(a, np.float32(0)), a),
    "one ulp high": lambda a: np.where(np.arange(len(a)) == 0, np.nextafter(a, np.float32(np.inf)), a),
    "nan": lambda a: np.where(np.arange(len(a)) == len(a) - 1, np.float32(np.nan), a),
    "short": lambda a: a[:-1], "long": lambda a: np.append(a, a[-1:])}


@pytest.mark.parametrize("damage", list(_MAXIMA_DAMAGE))
@pytest.mark.parametrize("name, unit", [("term_max", "term"), ("block_max", "block")])
def test_damaged_term_or_block_maxima(pristine: dict[str, Path], tmp_path: Path, name: str, unit: str, damage: str,
                                      verify: str) -> None:
    """The bounds pruning rules documents out with: one a ulp low would drop results silently."""
    d = _copy(pristine, "bm25plus", tmp_path)
    path = file_of(d, name)
    np.save(path, _MAXIMA_DAMAGE[damage](np.load(path)).astype(np.float32))
    reseal(d)
    pattern = rf"{name}{G}\.npy: (term \d+|block \d+ of term \d+) records maximum|{name}{G}\.npy: has \d+ {unit} maxima"
    with pytest.raises(KolmValueError, match=pattern):
        load_and_read(d, verify)  # quickly: at the first search of the term


@pytest.mark.parametrize("metric", ["cosine", "ip"])
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_embeddings(pristine: dict[str, Path], tmp_path: Path, metric: str, value: float,
                               verify: str) -> None:
    d = _copy(pristine, metric, tmp_path)
    _edit_npy(d, "embeddings", lambda a: a.__setitem__((2, 5), value))
    with pytest.raises(KolmValueError, match=rf"embeddings{G}\.npy: value at position 2, 5 is {value}; values must be finite"):
        DenseRetriever.load(d, verify=verify)


def test_cosine_index_rows_must_be_unit(pristine: dict[str, Path], tmp_path: Path, verify: str) -> None:
    d = _copy(pristine, "cosine", tmp_path)
    _edit_npy(d, "embeddings", lambda a: a.__setitem__((4, 0), 1e30))
    with pytest.raises(KolmValueError, match=rf"embeddings{G}\.npy: row 4 has norm .* unit \(or zero\) rows"):
        DenseRetriever.load(d, verify=verify)


def test_unknown_metric(pristine: dict[str, Path], tmp_path: Path) -> None:
    d = _copy(pristine, "cosine", tmp_path)
    _edit_json(d / "manifest.json", lambda m: m["config"].__setitem__("metric", "l2"))
    with pytest.raises(KolmValueError, match=r"manifest\.json: key 'config\.metric' must be one of \['cosine', 'ip'\], got 'l2'"):
        DenseRetriever.load(d)


BM25_FILES = ["documents", "vocab", "t_ptr", "t_docs", "t_w", "nonocc", "doc_len", "tf", "term_max", "block_max"]
BM25_KEYS = ["format", "version", "generation", "config", "n_docs", "stats", "files", "config.method", "config.k1",
             "config.b", "config.delta", "config.tokenizer", "config.fields", "config.fusion_k",
             "config.tokenizer.lowercase", "config.tokenizer.pattern", "config.tokenizer.stopwords",
             "config.tokenizer.stemmer", *[f"files.{k}" for k in BM25_FILES]]
DENSE_KEYS = ["format", "version", "generation", "config", "n_docs", "dim", "files", "config.metric", "config.fields",
              "config.fusion_k", "files.documents", "files.embeddings"]


def _with_entries(keys: list[str]) -> list[str]:
    return keys + [f"{k}.{part}" for k in keys if k.startswith("files.") for part in ("name", "bytes", "sha256")]


def test_key_lists_cover_the_manifests(pristine: dict[str, Path]) -> None:
    for name, keys in (("bm25plus", [*BM25_KEYS, "config.tokenizer.language"]), ("cosine", DENSE_KEYS)):
        body = json.loads((pristine[name] / "manifest.json").read_text())
        assert sorted(".".join(p) for p in key_paths(body)) == sorted(_with_entries(keys))


def test_an_index_saved_before_languages_loads_as_english(pristine: dict[str, Path], tmp_path: Path) -> None:
    d = _copy(pristine, "bm25plus", tmp_path)
    body = json.loads((d / "manifest.json").read_text())
    del body["config"]["tokenizer"]["language"]
    (d / "manifest.json").write_text(json.dumps(body))
    assert BM25Retriever.load(d).tokenizer.to_config()["language"] == "english"
    body["config"]["tokenizer"]["language"] = 7
    (d / "manifest.json").write_text(json.dumps(body))
    with pytest.raises(KolmValueError, match="config.tokenizer.language"):
        BM25Retriever.load(d)


def _drop(body: dict[str, Any], key: str) -> None:
    *parents, last = key.split(".")
    for p in parents:
        body = body[p]
    del body[last]


@pytest.mark.parametrize("name, key", [("bm25plus", k) for k in BM25_KEYS] + [("cosine", k) for k in DENSE_KEYS])
def test_missing_manifest_key(pristine: dict[str, Path], tmp_path: Path, name: str, key: str) -> None:
    d = _copy(pristine, name, tmp_path)
    _edit_json(d / "manifest.json", lambda m: _drop(m, key))
    with pytest.raises(KolmValueError, match=rf"manifest\.json: key '{key}' is missing"):
        _load(d)


def _set(body: dict[str, Any], key: str, value: Any) -> None:
    *parents, last = key.split(".")
    for p in parents:
        body = body[p]
    body[last] = value


@pytest.mark.parametrize("key, value, what", [
    ("config.k1", "x", "must be a finite number"), ("config.k1", 10**400, "must be a finite number"), ("config.b", 2, r"must be a finite number in \[0, 1\]"),
    ("config.delta", None, "must be a finite number"), ("config.fusion_k", float("nan"), "must be a finite number"),
    ("config.method", "bm26", "must be one of"), ("n_docs", 40.0, "must be an integer"),
    ("n_docs", True, "must be an integer"), ("version", True, "this kolm_search reads 1"),
    ("format", "kolm-search/dense", "expected 'kolm-search/bm25'"), ("config", [], "must be an object"),
    ("config.tokenizer.lowercase", "yes", "must be true or false"), ("config.tokenizer.pattern", "(", "regex"),
    ("config.tokenizer.stemmer", "klingon", "stemmer"), ("config.tokenizer.stopwords", [1], "list of strings"),
    ("config.fields", "content", "list of field names"), ("config.fields", [1], "list of field names"), ("config.surplus", 1, "unknown key"),
    ("config.tokenizer.surplus", 1, "unknown key"), ("surplus", 1, "unknown key"),
    ("stats", "mine", "must be one of"), ("generation", "0" * 31, "must be 32 hex digits"),
    ("files", [], "must be an object"), ("files.surplus", 1, "must be an object of 'name', 'bytes' and 'sha256'"),
    ("files.t_w.name", "../../etc/passwd", "not a file of this save"),
    ("files.t_w.name", "t_w.00000000000000000000000000000000.npy", "not a file of this save"),
    ("files.t_w.bytes", -1, "must be a size in bytes"), ("files.t_w.sha256", "ab", "must be 64 hex digits"),
    ("files.t_w", None, "must be an object of")])
def test_mistyped_manifest_key(pristine: dict[str, Path], tmp_path: Path, key: str, value: Any, what: str) -> None:
    d = _copy(pristine, "bm25plus", tmp_path)
    _edit_json(d / "manifest.json", lambda m: _set(m, key, value))
    named = "key 'config.tokenizer'" if key in ("config.tokenizer.pattern", "config.tokenizer.stemmer") else f"key '{key}'"
    named = "key 'files.t_w" if key.startswith("files.t_w") else named
    with pytest.raises(KolmValueError, match=rf"manifest\.json: .*{what}") as info:
        BM25Retriever.load(d)
    assert named in str(info.value)


@pytest.mark.parametrize("file", ["manifest", "vocab"])
@pytest.mark.parametrize("content", [b"{", b"[1, 2", b"\xff\xfe{}", b"[" * 100_000, b""])
def test_bad_json(pristine: dict[str, Path], tmp_path: Path, file: str, content: bytes) -> None:
    d = _copy(pristine, "bm25plus", tmp_path)
    path = d / "manifest.json" if file == "manifest" else file_of(d, file)
    path.write_bytes(content)
    if file != "manifest":
        reseal(d)
    with pytest.raises(KolmValueError, match=rf"{re.escape(path.name)}: (invalid JSON|cannot read)"):
        BM25Retriever.load(d)


@pytest.mark.parametrize("mmap", [True, False])
def test_npy_header_must_match_the_file_and_nothing_is_unpickled(pristine: dict[str, Path], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch, mmap: bool) -> None:
    calls: list[Any] = []
    real = np.load
    monkeypatch.setattr(np, "load", lambda *a, **kw: calls.append(kw.get("allow_pickle")) or real(*a, **kw))
    d = _copy(pristine, "lucene", tmp_path)
    np.save(file_of(d, "t_w"), np.load(file_of(d, "t_w")).astype(object), allow_pickle=True)
    reseal(d)
    with pytest.raises(KolmValueError, match=rf"t_w{G}\.npy: dtype object is not a plain float dtype"):
        BM25Retriever.load(d, mmap=mmap)
    a = np.load(file_of(pristine["lucene"], "t_docs"))
    with file_of(d, "t_docs").open("wb") as fp:  # a header claiming 1000 times the data on disk
        np.lib.format.write_array_header_1_0(fp, {"descr": np.lib.format.dtype_to_descr(a.dtype),
                                                  "fortran_order": False, "shape": (len(a) * 1000,)})
        fp.write(a.tobytes())
    reseal(d)
    with pytest.raises(KolmValueError, match=rf"t_docs{G}\.npy: header declares int32 \(\d+,\) \(\d+ bytes\) but the file holds \d+ data bytes"):
        BM25Retriever.load(d, mmap=mmap)
    assert calls and not any(calls)  # numpy was only ever asked with allow_pickle=False


SAVE_OVER_MAPPED = """
import sys
import numpy as np
import pandas as pd
from kolm_search import BM25Retriever, Tokenizer
from kolm_search.retrievers.dense import DenseRetriever
path, kind = sys.argv[1], sys.argv[2]
cls = BM25Retriever if kind == "bm25" else DenseRetriever
old = cls.load(path, mmap=True)
q = ["w1 w2", "w3"] if kind == "bm25" else np.ones((2, 8), np.float32)
search = old.score_texts if kind == "bm25" else old.search_vectors
before = [a.tolist() for a in search(q, 5)]
small = pd.DataFrame({"id": ["a"], "content": ["w1"]})  # another, much smaller index saved over it
if kind == "bm25":
    BM25Retriever(small, tokenizer=Tokenizer(stemmer=None)).save(path)
else:
    DenseRetriever(small, embeddings=np.ones((1, 8), np.float32)).save(path)
assert [a.tolist() for a in search(q, 5)] == before, "the mapped index changed under its reader"
assert len(cls.load(path).table) == 1
print("ok")
"""


@pytest.mark.parametrize("name", ["bm25plus", "cosine"])
def test_saving_over_a_mapped_index_leaves_its_reader_intact(pristine: dict[str, Path], tmp_path: Path,
                                                             name: str) -> None:
    """``save`` replaces files atomically: a process that memory-mapped the old index keeps
    searching it (writing in place shrank the mapped files under it: SIGBUS)."""
    d = _copy(pristine, name, tmp_path)
    proc = subprocess.run([sys.executable, "-c", SAVE_OVER_MAPPED, str(d), KIND[name]], cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (proc.returncode, proc.stderr[-2000:])
    assert not [p for p in d.iterdir() if p.name.endswith(".tmp")]  # no temporary file left behind
