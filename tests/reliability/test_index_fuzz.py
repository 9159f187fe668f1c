"""Saved indexes under random damage: a clear ``KolmError`` at load, or correct results; never a crash.

Small BM25 (BM25+ and Lucene) and dense (cosine and inner product) indexes are saved, copied,
and each copy damaged at random (seeded ``np.random.Generator``): flipped bytes, single
values set to negative / huge / NaN / infinite / in-range-but-wrong, truncated or deleted files,
arrays rewritten with another dtype or shape (object arrays included: never unpickled), manifest
keys deleted, retyped or added, invalid JSON, a FIFO or a device in place of a file, a rewritten
document table; half the copies then have their manifest resealed (each named file's size and
sha256 recorded as they now are), so that the checks of what the files mean are reached, not only
the digests. Every copy is loaded and searched in a child process
(:mod:`tests.reliability.index_child`, many copies per process, one result line each, a deadline
per copy); a crash or hang is pinned to the copy that caused it and the rest run in a new child.

The oracle: the child exits normally; each copy either fails to load with a ``KolmError`` whose
message names one of the index's files, or loads and searches with results that equal a numpy
twin over the loaded arrays (BM25: the exhaustive and the pruned kernel, the latter on the loaded
term maxima) and are valid (rows in range, finite, best first); a copy whose files
are byte-identical to the original gives exactly the original's results.
``KOLM_INDEX_FUZZ_CASES`` / ``KOLM_INDEX_FUZZ_SEED`` widen the search. One test per defect class
is in ``test_index_load.py``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from tests.reliability.indexes import KIND, N_DOCS, build_indexes, case, key_paths, reseal, run_cases

N_CASES = int(os.environ.get("KOLM_INDEX_FUZZ_CASES", "400"))
SEED = int(os.environ.get("KOLM_INDEX_FUZZ_SEED", "16"))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_indexes(tmp_path_factory.mktemp("pristine"))


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


def manifest_key(d: Path, rng: np.random.Generator) -> str | None:
    f = d / "manifest.json"
    if not f.is_file():
        return None
    body = json.loads(f.read_text())
    path = _pick(rng, key_paths(body))
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
        parent[path[-1]] = _pick(rng, [None, "x", -1, 0, 1, 2, 0.5, 1e308, 2**70, 10**400, True, [], {}, float("nan"),
                                       float("inf"), "ip", "cosine", "l2", "english", "bm25l", ["w1"], [1],
                                       N_DOCS - 1, N_DOCS + 1, "(", "klingon", parent[path[-1]]])
    f.write_text(json.dumps(body))
    return f"manifest {'.'.join(path)}: {how} -> {parent.get(path[-1], '<gone>')!r}"


def bad_json(d: Path, rng: np.random.Generator) -> str | None:
    f = _pick(rng, _files(d, ".json"))
    if f is None:
        return None
    text = f.read_bytes()
    new = _pick(rng, [text[: int(rng.integers(0, len(text)))], b"\xff\xfe\x00garbage", b"[" * 100_000, b"null",
                      b"5", b'"x"', b"{}", b"[]", b"", b'{"format": "kolm-search/bm25", "version": 1}'])
    f.write_bytes(new)
    return f"{f.name} replaced by {new[:40]!r}"


def _named(d: Path, key: str) -> Path | None:
    """The file of ``key`` in ``d`` (``vocab.<generation>.json``), if it is still a file."""
    return next((p for p in d.glob(f"{key}.*") if p.is_file() and not p.is_symlink()), None)


def vocab(d: Path, rng: np.random.Generator) -> str | None:
    f = _named(d, "vocab")
    if f is None:
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
    return f"{f.name}: {how} {i} {j}"


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
    f = _named(d, "documents")
    if f is None:
        return None
    df = _read_documents(f)
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
    _write_documents(df, f)
    return f"{f.name}: {how}"


def _read_documents(f: Path) -> pd.DataFrame:
    if f.suffix == ".parquet":
        return pd.read_parquet(f)
    with pa.OSFile(str(f)) as source:  # read into memory: the file is rewritten in place next
        return pa.ipc.open_file(source).read_all().to_pandas()


def _write_documents(df: pd.DataFrame, f: Path) -> None:
    if f.suffix == ".parquet":
        df.to_parquet(f, index=False)
        return
    table = pa.Table.from_pandas(df, preserve_index=False)
    with pa.OSFile(str(f), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


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
    return re.search(r"manifest\.json|\w\.[0-9a-f]{32}\.(npy|json|arrow|parquet)", message) is not None


def _maybe_reseal(d: Path, rng: np.random.Generator) -> str:
    """Half the time, the manifest records the damaged files' sizes and digests (as someone who
    edits the files and the manifest would): the checks of meaning, not the digests, must refuse."""
    manifest = d / "manifest.json"
    if rng.random() < 0.5 or manifest.is_symlink() or not manifest.is_file():  # a FIFO would block
        return ""
    try:
        reseal(d)
    except Exception:  # a manifest that an earlier mutation broke
        return ""
    return "; resealed"


# -- the fuzz test ----------------------------------------------------------------------------
@pytest.mark.parametrize("verify", ["auto", "quick"])
def test_damaged_indexes_never_crash_and_never_answer_wrongly(pristine: dict[str, Path], tmp_path: Path,
                                                              verify: str) -> None:
    """Loaded in full (``"auto"``: these indexes are small) every damage is refused at load;
    loaded quickly, at load or when the damaged part is first read (the results' documents,
    the ids, the term frequencies), never with a wrong answer."""
    rng = np.random.default_rng(SEED + (verify == "quick"))
    cases, meta = [case(p, KIND[name], verify) for name, p in pristine.items()], []
    for i in range(N_CASES if verify == "auto" else N_CASES // 2):
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
        sealed = _maybe_reseal(d, rng)
        cases.append(case(d, KIND[name], verify))
        meta.append((name, "; ".join(done) + sealed, _identical(d, pristine[name])))
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
