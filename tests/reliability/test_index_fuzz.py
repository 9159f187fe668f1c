"""Saved indexes under random damage: a clear ``KolmError`` at load, or correct results; never a crash.

Small BM25 (BM25+ and Lucene) and dense (cosine and inner product) indexes are saved, copied,
and each copy damaged at random (seeded ``np.random.Generator``): flipped bytes, single
values set to negative / huge / NaN / infinite / in-range-but-wrong, truncated or deleted files,
arrays rewritten with another dtype or shape (object arrays included: never unpickled), manifest
keys deleted, retyped or added, invalid JSON, a FIFO or a device in place of a file, a rewritten
document table. Every copy is loaded and searched in a child process
(:mod:`tests.reliability.index_child`, many copies per process, one result line each, a deadline
per copy); a crash or hang is pinned to the copy that caused it and the rest run in a new child.

The oracle: the child exits normally; each copy either fails to load with a ``KolmError`` whose
message names one of the index's files, or loads and searches with results that equal a numpy
twin over the loaded arrays and are valid (rows in range, finite, best first); a copy whose files
are byte-identical to the original gives exactly the original's results.
``KOLM_INDEX_FUZZ_CASES`` / ``KOLM_INDEX_FUZZ_SEED`` widen the search.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kolm_search import BM25Retriever, KolmValueError, Tokenizer
from kolm_search.retrievers.dense import DenseRetriever
from tests.conftest import synthetic_corpus

ROOT = Path(__file__).resolve().parents[2]
N_CASES = int(os.environ.get("KOLM_INDEX_FUZZ_CASES", "240"))
SEED = int(os.environ.get("KOLM_INDEX_FUZZ_SEED", "16"))
N_DOCS, DIM, K = 40, 8, 7
QUERIES = ["w1 w2", "", "zz", "w3", "w5 w5 w9 w0", "w7 w11 w13 w2"]  # a last query without terms: h16-batch
FILES = ("manifest.json", "vocab.json", "documents.parquet", "t_ptr.npy", "t_docs.npy", "t_w.npy", "nonocc.npy",
         "doc_len.npy", "embeddings.npy")


# -- the indexes and the child process ------------------------------------------------------
@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pristine")
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
    return {name: root / name for name in ("bm25plus", "lucene", "cosine", "ip")}


KIND = {"bm25plus": "bm25", "lucene": "bm25", "cosine": "dense", "ip": "dense"}


def case(path: Path, kind: str) -> dict[str, Any]:
    vectors = np.random.default_rng(1).standard_normal((4, DIM)).round(3).tolist()
    return {"kind": kind, "dir": str(path), "queries": QUERIES, "vectors": vectors, "k": K}


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


# -- mutations: each alters one index copy in place and says how, or returns None -----------
def _pick(rng: np.random.Generator, items: list[Any]) -> Any:
    return items[int(rng.integers(0, len(items)))] if items else None


def _files(d: Path, suffix: str = "") -> list[Path]:
    return sorted(p for p in d.iterdir() if p.name.endswith(suffix) and p.is_file())


def flip_bytes(d: Path, rng: np.random.Generator) -> str | None:
    f = _pick(rng, _files(d))
    data = bytearray(f.read_bytes())
    if not data:
        return None
    for _ in range(int(rng.integers(1, 4))):
        pos = int(rng.integers(0, min(len(data), 160))) if rng.random() < 0.3 else int(rng.integers(0, len(data)))
        data[pos] ^= int(rng.integers(1, 256))
    f.write_bytes(bytes(data))
    return f"flip bytes of {f.name}"


def set_value(d: Path, rng: np.random.Generator) -> str | None:
    f = _pick(rng, _files(d, ".npy"))
    a = np.load(f).copy()
    if a.size == 0:
        return None
    idx = tuple(int(rng.integers(0, s)) for s in a.shape)
    old = a[idx].item()
    if a.dtype.kind == "f":
        v: Any = _pick(rng, [np.nan, np.inf, -np.inf, -1.0, 0.0, 1e30, -1e30, 3.4e38, old * 2, -old, old, 1e-3])
    else:
        info, n = np.iinfo(a.dtype), len(a)
        v = _pick(rng, [-1, -(2**31), 0, 1, n - 1, n, n + 1, N_DOCS, old + 1, old - 1, old, info.max, info.min,
                        int(rng.integers(int(a.min()), int(a.max()) + 1))])
        v = min(max(v, info.min), info.max)
    a[idx] = v
    np.save(f, a)
    return f"{f.name}[{idx}] = {v!r} (was {old!r})"


def swap_values(d: Path, rng: np.random.Generator) -> str | None:
    f = _pick(rng, _files(d, ".npy"))
    a = np.load(f).copy()
    if a.shape[0] < 2:
        return None
    i, j = (int(x) for x in rng.choice(a.shape[0], 2, replace=False))
    a[[i, j]] = a[[j, i]]
    np.save(f, a)
    return f"swap {f.name}[{i}] and [{j}]"


def truncate(d: Path, rng: np.random.Generator) -> str | None:
    f = _pick(rng, _files(d))
    size = f.stat().st_size
    new = int(rng.integers(0, size)) if size else 0
    os.truncate(f, new)
    return f"truncate {f.name} to {new} of {size} bytes"


def retype(d: Path, rng: np.random.Generator) -> str | None:
    f = _pick(rng, _files(d, ".npy"))
    a = np.load(f)
    name = _pick(rng, ["int8", "int16", "int32", "int64", "uint32", "uint64", "float16", "float32", "float64",
                       "bool", "complex64", "object", "struct", "swapped"])
    with np.errstate(all="ignore"):
        if name == "struct":
            b = np.zeros(a.shape, dtype=[("a", "<i8")])
        elif name == "swapped":
            b = a.astype(a.dtype.newbyteorder())
        else:
            b = a.astype(object if name == "object" else name)
    np.save(f, b, allow_pickle=name == "object")
    return f"{f.name} rewritten as {name}"


def reshape(d: Path, rng: np.random.Generator) -> str | None:
    f = _pick(rng, _files(d, ".npy"))
    a = np.load(f)
    how = _pick(rng, ["drop", "append", "column", "row", "scalar", "empty", "transpose", "flat"])
    b = {"drop": lambda: a[:-1], "append": lambda: np.concatenate([a, a[-1:]]) if len(a) else a[:0],
         "column": lambda: a.reshape(len(a), -1)[:, :1] if a.ndim == 1 else a[:, :-1],
         "row": lambda: a.reshape(1, -1), "scalar": lambda: a.ravel()[:1].reshape(()), "empty": lambda: a[:0],
         "transpose": lambda: a.T.copy(), "flat": lambda: a.ravel()}[how]()
    np.save(f, b)
    return f"{f.name} reshaped ({how}) from {a.shape} to {b.shape}"


def delete(d: Path, rng: np.random.Generator) -> str | None:
    f = _pick(rng, _files(d))
    f.unlink()
    return f"delete {f.name}"


def _key_paths(obj: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.append((*prefix, k))
            out.extend(_key_paths(v, (*prefix, k)))
    return out


def manifest_key(d: Path, rng: np.random.Generator) -> str | None:
    f = d / "manifest.json"
    if not f.is_file():
        return None
    body = json.loads(f.read_text())
    path = _pick(rng, _key_paths(body))
    parent = body
    for k in path[:-1]:
        parent = parent[k]
    how = _pick(rng, ["delete", "set", "set", "set", "add", "rename"])
    if how == "delete":
        del parent[path[-1]]
    elif how == "add":
        parent["surplus"] = 1
    elif how == "rename":
        parent[path[-1] + "_"] = parent.pop(path[-1])
    else:
        parent[path[-1]] = _pick(rng, [None, "x", -1, 0, 1, 2, 0.5, 1e308, 2**70, True, [], {}, float("nan"),
                                       float("inf"), "ip", "cosine", "l2", "english", "bm25l", ["w1"], [1],
                                       N_DOCS - 1, N_DOCS + 1, "(", "klingon", parent[path[-1]]])
    f.write_text(json.dumps(body))
    return f"manifest {'.'.join(path)}: {how} -> {parent.get(path[-1], '<gone>')!r}"


def bad_json(d: Path, rng: np.random.Generator) -> str | None:
    f = _pick(rng, [p for p in (d / "manifest.json", d / "vocab.json") if p.is_file()])
    if f is None:
        return None
    text = f.read_bytes()
    new = _pick(rng, [text[: int(rng.integers(0, len(text)))], b"\xff\xfe\x00garbage", b"[" * 100_000, b"null",
                      b"5", b'"x"', b"{}", b"[]", b"", b'{"format": "kolm-search/bm25", "version": 1}'])
    f.write_bytes(new)
    return f"{f.name} replaced by {new[:40]!r}"


def vocab(d: Path, rng: np.random.Generator) -> str | None:
    f = d / "vocab.json"
    if not f.is_file():
        return None
    terms = json.loads(f.read_text())
    i, j = int(rng.integers(0, len(terms))), int(rng.integers(0, len(terms)))
    how = _pick(rng, ["drop", "duplicate", "int", "null", "swap", "append"])
    if how == "drop":
        terms.pop(i)
    elif how == "duplicate":
        terms[i] = terms[j]
    elif how in ("int", "null"):
        terms[i] = 5 if how == "int" else None
    elif how == "swap":
        terms[i], terms[j] = terms[j], terms[i]
    else:
        terms.append("zzz")
    f.write_text(json.dumps(terms))
    return f"vocab.json: {how} {i} {j}"


def swap_files(d: Path, rng: np.random.Generator) -> str | None:
    names = _files(d, ".npy")
    if len(names) < 2:
        return None
    a, b = (names[int(x)] for x in rng.choice(len(names), 2, replace=False))
    tmp = d / "swap.tmp"
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)
    return f"swap files {a.name} and {b.name}"


def not_a_file(d: Path, rng: np.random.Generator) -> str | None:
    f = _pick(rng, _files(d))
    f.unlink()
    how = _pick(rng, ["fifo", "dev", "dir", "link"])
    if how == "fifo":
        os.mkfifo(f)
    elif how == "dev":
        f.symlink_to("/dev/zero")
    elif how == "dir":
        f.mkdir()
    else:
        f.symlink_to(_pick(rng, _files(d)) or d / "nowhere")
    return f"{f.name} replaced by a {how}"


def table(d: Path, rng: np.random.Generator) -> str | None:
    f = d / "documents.parquet"
    if not f.is_file():
        return None
    df = pd.read_parquet(f)
    how = _pick(rng, ["drop", "dup_id", "null_id", "extra", "reverse", "bad_tags", "no_content"])
    if how == "drop":
        df = df.iloc[1:]
    elif how == "dup_id":
        df.loc[1, "id"] = df.loc[0, "id"]
    elif how == "null_id":
        df.loc[2, "id"] = None
    elif how == "extra":
        df = pd.concat([df, df.iloc[:1].assign(id="new")])
    elif how == "reverse":
        df = df.iloc[::-1]
    elif how == "bad_tags":
        df["tags"] = "[not json"
    else:
        df = df.drop(columns=["content"])
    df.to_parquet(f, index=False)
    return f"documents.parquet: {how}"


MUTATIONS: list[Callable[[Path, np.random.Generator], str | None]] = [
    flip_bytes, set_value, set_value, swap_values, truncate, retype, reshape, delete, manifest_key, manifest_key,
    bad_json, vocab, swap_files, not_a_file, table]


def _identical(a: Path, b: Path) -> bool:
    names = {p.name for p in a.iterdir()} | {p.name for p in b.iterdir()}
    for name in names:
        pa, pb = a / name, b / name
        if not (pa.is_file() and pb.is_file() and not pa.is_symlink()) or pa.read_bytes() != pb.read_bytes():
            return False
    return True


def _names_a_file(message: str) -> bool:
    return any(name in message for name in FILES)


# -- the fuzz test ----------------------------------------------------------------------------
def test_damaged_indexes_never_crash_and_never_answer_wrongly(pristine: dict[str, Path], tmp_path: Path) -> None:
    rng = np.random.default_rng(SEED)
    cases, meta = [case(p, KIND[name]) for name, p in pristine.items()], []
    for i in range(N_CASES):
        name = _pick(rng, list(pristine))
        d = tmp_path / f"{name}-{i}"
        shutil.copytree(pristine[name], d)
        done: list[str] = []
        while len(done) < (1 if rng.random() < 0.75 else int(rng.integers(2, 4))):
            mutate = _pick(rng, MUTATIONS)
            try:
                desc = mutate(d, rng)
            except Exception as exc:  # files an earlier mutation already broke
                desc = f"{mutate.__name__} on damaged files: {type(exc).__name__}"
            if desc is not None:
                done.append(desc)
        cases.append(case(d, KIND[name]))
        meta.append((name, "; ".join(done), _identical(d, pristine[name])))
    records = run_cases(cases)
    reference = dict(zip(pristine, records, strict=False))
    assert all(r["status"] == "ok" for r in reference.values()), reference
    failures, seen = [], Counter()
    for rec, (name, desc, noop) in zip(records[len(pristine):], meta, strict=True):
        seen[rec["status"]] += 1
        if rec["status"] not in ("ok", "kolm"):
            failures.append(f"{name} [{desc}]: {rec['status']}: {rec.get('error')}")
        elif rec["status"] == "kolm" and not _names_a_file(rec["error"]):
            failures.append(f"{name} [{desc}]: error names no file: {rec['error']}")
        elif noop and rec != reference[name]:
            failures.append(f"{name} [{desc}]: unchanged files, other outcome: {rec}")
    assert not failures, f"{len(failures)} of {N_CASES} damaged indexes misbehaved:\n" + "\n".join(failures[:15])
    assert seen["kolm"] > N_CASES // 3 and seen["ok"] > N_CASES // 20, seen  # both outcomes exercised


# -- one test per defect class of issue 16 ----------------------------------------------------
def _copy(pristine: dict[str, Path], name: str, tmp_path: Path) -> Path:
    d = tmp_path / name
    shutil.copytree(pristine[name], d)
    return d


def _edit_npy(path: Path, edit: Callable[[np.ndarray], Any]) -> None:
    a = np.load(path).copy()
    edit(a)
    np.save(path, a)


def _edit_json(path: Path, edit: Callable[[Any], Any]) -> None:
    body = json.loads(path.read_text())
    edit(body)
    path.write_text(json.dumps(body))


def _load(d: Path, **kwargs: Any) -> Any:
    return (DenseRetriever if (d / "embeddings.npy").exists() else BM25Retriever).load(d, **kwargs)


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
        _edit_npy(d / "t_ptr.npy", edit)
        dirs.append(d)
    d = tmp_path / "docs"
    shutil.copytree(pristine["bm25plus"], d)
    _edit_npy(d / "t_docs.npy", lambda a: a.__setitem__(0, -(2**31)))
    dirs.append(d)
    records = run_cases([case(d, "bm25") for d in dirs])
    assert [r["status"] for r in records] == ["kolm"] * len(dirs), records
    assert all(r["type"] == "KolmValueError" and ("t_ptr.npy" in r["error"] or "t_docs.npy" in r["error"])
               for r in records), records


def test_decreasing_pointers(pristine: dict[str, Path], tmp_path: Path) -> None:
    d = _copy(pristine, "bm25plus", tmp_path)
    _edit_npy(d / "t_ptr.npy", lambda a: a.__setitem__([5, 6], a[[6, 5]]))  # in range, ends intact
    with pytest.raises(KolmValueError, match=r"t_ptr\.npy: pointers decrease at position 6 "):
        BM25Retriever.load(d)


@pytest.mark.parametrize("value", [-1, -(2**31), N_DOCS, 2**31 - 1])
def test_document_ids_out_of_range(pristine: dict[str, Path], tmp_path: Path, value: int) -> None:
    d = _copy(pristine, "lucene", tmp_path)
    _edit_npy(d / "t_docs.npy", lambda a: a.__setitem__(9, value))
    with pytest.raises(KolmValueError, match=rf"t_docs\.npy: document row {value} at position 9 lies outside \[0, {N_DOCS}\)"):
        BM25Retriever.load(d)


def test_unordered_document_ids_within_a_term(pristine: dict[str, Path], tmp_path: Path) -> None:
    d = _copy(pristine, "lucene", tmp_path)
    _edit_npy(d / "t_docs.npy", lambda a: a.__setitem__(2, a[1]))  # a duplicate within term 0 (df >= 3)
    with pytest.raises(KolmValueError, match=r"t_docs\.npy: document rows not ascending within a term at position 2"):
        BM25Retriever.load(d)


@pytest.mark.parametrize("name, value, shown", [("t_w", np.nan, "nan"), ("t_w", -np.inf, "-inf"),
                                                 ("nonocc", np.inf, "inf"), ("t_w", -1.0, "-1.0")])
def test_non_finite_or_negative_weights(pristine: dict[str, Path], tmp_path: Path, name: str, value: float,
                                        shown: str) -> None:
    d = _copy(pristine, "bm25plus", tmp_path)
    _edit_npy(d / f"{name}.npy", lambda a: a.__setitem__(3, value))
    with pytest.raises(KolmValueError, match=rf"{name}\.npy: value at position 3 is {shown}; values must be"):
        BM25Retriever.load(d)


@pytest.mark.parametrize("metric", ["cosine", "ip"])
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_embeddings(pristine: dict[str, Path], tmp_path: Path, metric: str, value: float) -> None:
    d = _copy(pristine, metric, tmp_path)
    _edit_npy(d / "embeddings.npy", lambda a: a.__setitem__((2, 5), value))
    with pytest.raises(KolmValueError, match=rf"embeddings\.npy: value at position 2, 5 is {value}; values must be finite"):
        DenseRetriever.load(d)


def test_cosine_index_rows_must_be_unit(pristine: dict[str, Path], tmp_path: Path) -> None:
    d = _copy(pristine, "cosine", tmp_path)
    _edit_npy(d / "embeddings.npy", lambda a: a.__setitem__((4, 0), 1e30))
    with pytest.raises(KolmValueError, match=r"embeddings\.npy: row 4 has norm .* unit \(or zero\) rows"):
        DenseRetriever.load(d)


def test_unknown_metric(pristine: dict[str, Path], tmp_path: Path) -> None:
    d = _copy(pristine, "cosine", tmp_path)
    _edit_json(d / "manifest.json", lambda m: m["config"].__setitem__("metric", "l2"))
    with pytest.raises(KolmValueError, match=r"manifest\.json: key 'config\.metric' must be one of \['cosine', 'ip'\], got 'l2'"):
        DenseRetriever.load(d)


BM25_KEYS = ["format", "version", "config", "n_docs", "config.method", "config.k1", "config.b", "config.delta",
             "config.tokenizer", "config.fields", "config.fusion_k", "config.tokenizer.lowercase",
             "config.tokenizer.pattern", "config.tokenizer.stopwords", "config.tokenizer.stemmer"]
DENSE_KEYS = ["format", "version", "config", "n_docs", "dim", "config.metric", "config.fields", "config.fusion_k"]


def test_key_lists_cover_the_manifests(pristine: dict[str, Path]) -> None:
    for name, keys in (("bm25plus", BM25_KEYS), ("cosine", DENSE_KEYS)):
        body = json.loads((pristine[name] / "manifest.json").read_text())
        assert sorted(".".join(p) for p in _key_paths(body)) == sorted(keys)


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
    ("config.k1", "x", "must be a finite number"), ("config.b", 2, r"must be a finite number in \[0, 1\]"),
    ("config.delta", None, "must be a finite number"), ("config.fusion_k", float("nan"), "must be a finite number"),
    ("config.method", "bm26", "must be one of"), ("n_docs", 40.0, "must be an integer"),
    ("n_docs", True, "must be an integer"), ("version", True, "this kolm_search reads 1"),
    ("format", "kolm-search/dense", "expected 'kolm-search/bm25'"), ("config", [], "must be an object"),
    ("config.tokenizer.lowercase", "yes", "must be true or false"), ("config.tokenizer.pattern", "(", "regex"),
    ("config.tokenizer.stemmer", "klingon", "stemmer"), ("config.tokenizer.stopwords", [1], "list of strings"),
    ("config.fields", "content", "list of field names"), ("config.fields", [1], "list of field names"), ("config.surplus", 1, "unknown key"),
    ("config.tokenizer.surplus", 1, "unknown key"), ("surplus", 1, "unknown key")])
def test_mistyped_manifest_key(pristine: dict[str, Path], tmp_path: Path, key: str, value: Any, what: str) -> None:
    d = _copy(pristine, "bm25plus", tmp_path)
    _edit_json(d / "manifest.json", lambda m: _set(m, key, value))
    named = "key 'config.tokenizer'" if key in ("config.tokenizer.pattern", "config.tokenizer.stemmer") else f"key '{key}'"
    with pytest.raises(KolmValueError, match=rf"manifest\.json: .*{what}") as info:
        BM25Retriever.load(d)
    assert named in str(info.value)


@pytest.mark.parametrize("file", ["manifest.json", "vocab.json"])
@pytest.mark.parametrize("content", [b"{", b"[1, 2", b"\xff\xfe{}", b"[" * 100_000, b""])
def test_bad_json(pristine: dict[str, Path], tmp_path: Path, file: str, content: bytes) -> None:
    d = _copy(pristine, "bm25plus", tmp_path)
    (d / file).write_bytes(content)
    with pytest.raises(KolmValueError, match=rf"{file}: (invalid JSON|cannot read)"):
        BM25Retriever.load(d)


@pytest.mark.parametrize("mmap", [True, False])
def test_npy_header_must_match_the_file_and_nothing_is_unpickled(pristine: dict[str, Path], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch, mmap: bool) -> None:
    calls: list[Any] = []
    real = np.load
    monkeypatch.setattr(np, "load", lambda *a, **kw: calls.append(kw.get("allow_pickle")) or real(*a, **kw))
    d = _copy(pristine, "lucene", tmp_path)
    np.save(d / "t_w.npy", np.load(d / "t_w.npy").astype(object), allow_pickle=True)
    with pytest.raises(KolmValueError, match=r"t_w\.npy: dtype object is not a plain float dtype"):
        BM25Retriever.load(d, mmap=mmap)
    a = np.load(pristine["lucene"] / "t_docs.npy")
    with (d / "t_docs.npy").open("wb") as fp:  # a header claiming 1000 times the data on disk
        np.lib.format.write_array_header_1_0(fp, {"descr": np.lib.format.dtype_to_descr(a.dtype),
                                                  "fortran_order": False, "shape": (len(a) * 1000,)})
        fp.write(a.tobytes())
    with pytest.raises(KolmValueError, match=r"t_docs\.npy: header declares int32 \(\d+,\) \(\d+ bytes\) but the file holds \d+ data bytes"):
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
