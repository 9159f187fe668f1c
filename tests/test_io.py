"""BEIR folders, TREC files, parquet, and the downloader against a server on 127.0.0.1."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import json
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kolm_search import DownloadError, FrameValidationError, KolmValueError
from kolm_search.io import (
    download_beir,
    load_beir,
    load_dataset,
    read_qrels,
    read_run,
    write_qrels,
    write_run,
)


def make_beir(root: Path, gz: bool = False) -> Path:
    root.mkdir(parents=True)
    (root / "qrels").mkdir()
    corpus = "\n".join(json.dumps({"_id": f"d{i}", "title": f"T{i}", "text": f"text {i}"}) for i in range(5))
    queries = "\n".join(json.dumps({"_id": f"q{i}", "text": f"query {i}"}) for i in range(3))
    for name, body in (("corpus.jsonl", corpus), ("queries.jsonl", queries)):
        if gz:
            with gzip.open(root / f"{name}.gz", "wt") as fh:
                fh.write(body)
        else:
            (root / name).write_text(body)
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td1\t2\nq1\td2\t1\n")
    return root


@pytest.mark.parametrize("gz", [False, True])
def test_load_beir(tmp_path: Path, gz: bool) -> None:
    ds = load_beir(make_beir(tmp_path / "mini", gz))
    assert list(ds.corpus.columns[:3]) == ["id", "title", "content"] and len(ds.corpus) == 5
    assert list(ds.queries.columns) == ["qid", "query"] and len(ds.queries) == 3
    assert ds.qrels.relevance.tolist() == [2, 1] and ds.qrels.relevance.dtype == np.int64
    assert list(ds.judged_queries().qid) == ["q0", "q1"]


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda r: (r / "corpus.jsonl").write_text('{"_id": "a", "text": "x"}\n{broken\n'), r"corpus.jsonl:2: invalid JSON"),
        (lambda r: (r / "corpus.jsonl").write_text('{"_id": "a", "text": "x"}\n{"_id": "a", "text": "y"}\n'), "duplicate document id 'a'"),
        (lambda r: (r / "queries.jsonl").write_text('{"_id": "q", "title": "no text"}\n'), r"queries.jsonl:1: query 'q' has no string"),
        (lambda r: (r / "qrels" / "test.tsv").write_text("q0\td1\thigh\n"), r"test.tsv:1: relevance 'high'"),
        (lambda r: (r / "qrels" / "test.tsv").write_text("q0\td1\n"), r"test.tsv:1: expected 3 or 4 fields"),
        (lambda r: (r / "corpus.jsonl").unlink(), "corpus.jsonl"),
    ],
)
def test_load_beir_errors_name_file_and_line(tmp_path: Path, mutate, match: str) -> None:  # type: ignore[no-untyped-def]
    root = make_beir(tmp_path / "mini")
    mutate(root)
    with pytest.raises((FrameValidationError, KolmValueError), match=match):
        load_beir(root)


def test_missing_split_and_folder(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "mini")
    with pytest.raises(KolmValueError, match="available: \\['test'\\]"):
        load_beir(root, split="dev")
    with pytest.raises(KolmValueError, match="does not exist"):
        load_beir(tmp_path / "nope")


@pytest.mark.parametrize("suffix", [".trec", ".trec.gz", ".parquet"])
def test_run_round_trip_exact(tmp_path: Path, suffix: str) -> None:
    rng = np.random.default_rng(0)
    run = pd.DataFrame({"qid": ["1"] * 3 + ["2"] * 2, "doc_id": ["a", "b", "c", "a", "z"],
                        "rank": [0, 1, 2, 0, 1], "score": rng.random(5) * 1e3 - 500})
    write_run(run, tmp_path / f"r{suffix}")
    back = read_run(tmp_path / f"r{suffix}")
    assert isinstance(back["qid"].dtype, pd.CategoricalDtype)  # coded once, here
    assert isinstance(back["doc_id"].dtype, pd.StringDtype)  # Arrow strings: no second pass over them
    pd.testing.assert_frame_equal(back.reset_index(drop=True).astype({"qid": str, "doc_id": str}), run,
                                  check_dtype=False)
    assert back.score.tolist() == run.score.tolist()  # bit-exact
    write_run(back, tmp_path / f"again{suffix}")
    if suffix != ".parquet":
        opener = gzip.open if suffix.endswith(".gz") else open
        with opener(tmp_path / f"r{suffix}", "rt") as a, opener(tmp_path / f"again{suffix}", "rt") as b:
            assert a.read() == b.read()


@pytest.mark.parametrize("suffix", [".trec", ".trec.gz"])
@pytest.mark.parametrize("rows", [0, 1, 6, 7, 50, 141])
def test_run_written_in_parallel_batches_equals_one_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          suffix: str, rows: int) -> None:
    """Batches formatted on worker threads and written in order give the bytes of pyarrow's one
    CSV writer over the whole run, at every batch boundary (7 rows a batch here), and read back."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    from kolm_search.io import _arrow_trec

    monkeypatch.setattr(_arrow_trec, "_BATCH_ROWS", 7)
    rng = np.random.default_rng(rows)
    qid = np.repeat([f"q{i}" for i in range(rows // 5 + 1)], 5)[:rows]
    run = pd.DataFrame({"qid": pd.Categorical(qid), "doc_id": [f"d{i}" for i in rng.permutation(rows)],
                        "rank": np.tile(np.arange(5), rows // 5 + 1)[:rows],
                        "score": rng.standard_normal(rows) * 10.0 ** rng.integers(-8, 9, rows)})
    write_run(run, tmp_path / f"r{suffix}", tag="t1")
    oracle = pa.table({"qid": pa.array(qid, pa.string()), "q0": pa.array(["Q0"] * rows, pa.string()),
                       "doc_id": pa.array(run["doc_id"], pa.string()), "rank": pa.array(run["rank"] + 1, pa.int64()),
                       "score": pa.array(run["score"], pa.float64()), "tag": pa.array(["t1"] * rows, pa.string())})
    out = pa.BufferOutputStream()
    pcsv.write_csv(oracle, out, write_options=pcsv.WriteOptions(include_header=False, delimiter=" ",
                                                                 quoting_style="none"))
    opener = gzip.open if suffix.endswith(".gz") else open
    with opener(tmp_path / f"r{suffix}", "rb") as fh:
        assert fh.read() == out.getvalue().to_pybytes()
    if rows:
        back = read_run(tmp_path / f"r{suffix}")
        assert back["score"].tolist() == run["score"].tolist()
        assert back["doc_id"].astype(str).tolist() == run["doc_id"].tolist()


@pytest.mark.parametrize("fail_after", [0, 1, 3])
def test_run_write_failing_mid_way_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        fail_after: int) -> None:
    """A write that fails after some batches (a full disk, say) keeps the file it would have
    replaced byte for byte, leaves no temporary file, and stops its formatting threads."""
    import threading

    from kolm_search.io import _arrow_trec

    monkeypatch.setattr(_arrow_trec, "_BATCH_ROWS", 4)
    run = pd.DataFrame({"qid": ["q1"] * 20, "doc_id": [f"d{i}" for i in range(20)], "rank": range(20),
                        "score": np.linspace(1, 0, 20)})
    target = tmp_path / "r.trec"
    target.write_text("1 Q0 old 1 1.0 before\n")
    blocks = _arrow_trec._csv_blocks

    def failing(*args: object) -> Iterator[tuple[int, object]]:
        for i, block in enumerate(blocks(*args)):  # type: ignore[arg-type]
            if i == fail_after:
                raise OSError(28, "No space left on device")
            yield block

    monkeypatch.setattr(_arrow_trec, "_csv_blocks", failing)
    threads = threading.active_count()
    with pytest.raises(OSError, match="No space left"):
        write_run(run, target)
    assert target.read_text() == "1 Q0 old 1 1.0 before\n"
    assert [p.name for p in tmp_path.iterdir()] == ["r.trec"]
    assert threading.active_count() == threads


@pytest.mark.parametrize("suffix", [".trec", ".parquet"])
@pytest.mark.parametrize("column", ["qid", "doc_id"])
def test_run_with_a_missing_id_is_refused(tmp_path: Path, suffix: str, column: str) -> None:
    run = pd.DataFrame({"qid": ["q1", "q1", "q2"], "doc_id": ["a", "b", "c"], "score": [1.0, 0.5, 0.2]})
    run.loc[2, column] = None
    with pytest.raises(FrameValidationError, match=f"run {column} has a missing value at row 2"):
        write_run(run, tmp_path / f"r{suffix}")
    assert not list(tmp_path.iterdir())


def test_ranks_of_many_parse_blocks_read_on_threads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file of several parse blocks (1 MB each) has its ranks read block by block on two
    threads: the same ranks in order, and a bad rank in a late block still named by its line."""
    from kolm_search.io import _arrow_trec

    monkeypatch.setattr(_arrow_trec, "_BATCH_ROWS", 1)  # the threaded path for any file of two blocks
    n = 80_000
    lines = [f"q{i // 100} Q0 d{i} {i % 100 + 1} {1.0 - (i % 100) / 100} t\n" for i in range(n)]
    (tmp_path / "r.trec").write_text("".join(lines))
    back = read_run(tmp_path / "r.trec")
    assert back["rank"].tolist() == [i % 100 for i in range(n)]
    lines[n - 10] = lines[n - 10].replace(" 91 ", " 9x1 ")
    (tmp_path / "bad.trec").write_text("".join(lines))
    with pytest.raises(FrameValidationError, match=f"bad.trec:{n - 9}: rank '9x1'"):
        read_run(tmp_path / "bad.trec")


@pytest.mark.parametrize("suffix", [".txt", ".txt.gz", ".parquet"])
def test_qrels_round_trip(tmp_path: Path, suffix: str) -> None:
    qrels = pd.DataFrame({"qid": ["1", "1", "2"], "doc_id": ["a", "b", "a"], "relevance": [2, 0, -1]})
    write_qrels(qrels, tmp_path / f"q{suffix}")
    back = read_qrels(tmp_path / f"q{suffix}")
    assert all(isinstance(back[c].dtype, pd.CategoricalDtype) for c in ("qid", "doc_id"))
    pd.testing.assert_frame_equal(back.astype({"qid": str, "doc_id": str}), qrels, check_dtype=False)


@pytest.mark.parametrize(
    "text, match",
    [("1 Q0 a 1 0.5\n", r"r.trec:1: expected 6 fields"), ("1 Q0 a 1 0.5 t\n1 Q0 b x 0.4 t\n", r"r.trec:2: rank 'x'"),
     ("1 Q0 a 1 abc t\n", r"r.trec:1: score 'abc'"), ("1 Q0 a 1 0.5 t\n1 Q0 a 2 0.4 t\n", "appears twice"),
     ("1 Q0 a 1 nan t\n", "not finite")],
)
def test_bad_run_files(tmp_path: Path, text: str, match: str) -> None:
    (tmp_path / "r.trec").write_text(text)
    with pytest.raises(FrameValidationError, match=match):
        read_run(tmp_path / "r.trec")


def test_bad_qrels_and_missing_files(tmp_path: Path) -> None:
    (tmp_path / "q.txt").write_text("1 0 a 1\n1 0 b one\n")
    with pytest.raises(FrameValidationError, match=r"q.txt:2: relevance 'one'"):
        read_qrels(tmp_path / "q.txt")
    with pytest.raises(KolmValueError, match="does not exist"):
        read_run(tmp_path / "missing.trec")


# ---------------------------------------------------------------- downloads (loopback only)
def zip_bytes(members: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, body in members.items():
            zf.writestr(name, body)
    return buf.getvalue()


GOOD = zip_bytes({
    "mini/corpus.jsonl": json.dumps({"_id": "d1", "title": "", "text": "hello"}) + "\n",
    "mini/queries.jsonl": json.dumps({"_id": "q1", "text": "hello"}) + "\n",
    "mini/qrels/test.tsv": "query-id\tcorpus-id\tscore\nq1\td1\t1\n",
})
EVIL = zip_bytes({"mini/corpus.jsonl": "{}", "../../escaped.txt": "gotcha"})


@pytest.fixture()
def server() -> Iterator[tuple[str, dict[str, bytes], list[str]]]:
    files: dict[str, bytes] = {}
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            body = files.get(self.path)
            if body is None:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", files, hits
    httpd.shutdown()
    httpd.server_close()


def registry(base: str, name: str, body: bytes, md5: str | None = None) -> dict[str, dict[str, str]]:
    return {"mini": {"url": f"{base}/{name}", "md5": md5 or hashlib.md5(body).hexdigest(), "folder": "mini"}}


def test_download_verifies_unpacks_and_caches(server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    base, files, hits = server
    files["/mini.zip"] = GOOD
    reg = registry(base, "mini.zip", GOOD)
    path = download_beir("mini", tmp_path, registry=reg, progress=False)
    assert path == tmp_path / "beir" / "mini" and load_beir(path).corpus.id.tolist() == ["d1"]
    assert download_beir("mini", tmp_path, registry=reg, progress=False) == path
    assert hits == ["/mini.zip"]  # the cache was reused
    assert sorted(p.name for p in (tmp_path / "beir").iterdir()) == ["mini"]  # no temporaries left


@pytest.mark.parametrize("case", ["bad-checksum", "404", "not-a-zip", "path-escape", "refused"])
def test_download_failures_leave_nothing(server, tmp_path: Path, case: str) -> None:  # type: ignore[no-untyped-def]
    base, files, _ = server
    files["/good.zip"], files["/junk.zip"], files["/evil.zip"] = GOOD, b"not a zip", EVIL
    reg = {
        "bad-checksum": registry(base, "good.zip", GOOD, md5="0" * 32),
        "404": registry(base, "missing.zip", GOOD),
        "not-a-zip": registry(base, "junk.zip", b"not a zip"),
        "path-escape": registry(base, "evil.zip", EVIL),
        "refused": registry("http://127.0.0.1:9", "x.zip", GOOD),
    }[case]
    with pytest.raises(DownloadError):
        download_beir("mini", tmp_path / "cache", registry=reg, progress=False, timeout=5)
    leftovers = list((tmp_path / "cache" / "beir").iterdir())
    assert leftovers == [], leftovers
    assert not (tmp_path / "escaped.txt").exists()


def test_unknown_name_and_load_dataset(tmp_path: Path) -> None:
    with pytest.raises(KolmValueError, match="unknown BEIR dataset"):
        download_beir("no-such-set", tmp_path)
    with pytest.raises(KolmValueError, match="neither a BEIR folder"):
        load_dataset("no-such-set")
    assert len(load_dataset(make_beir(tmp_path / "mini")).corpus) == 5


def test_packaged_registry_has_the_issue_names() -> None:
    from kolm_search.io import beir_registry

    reg = beir_registry()
    for name in ("scifact", "nfcorpus", "fiqa", "arguana", "scidocs", "trec-covid"):
        assert reg[name]["url"].endswith(f"/{name}.zip") and len(reg[name]["md5"]) == 32


def test_readers_keep_ids_as_written(tmp_path: Path) -> None:
    """Ids are strings whatever they look like: "01" and "1" stay apart, "NA" and "nan" are ids."""
    (tmp_path / "r.trec").write_text("01 Q0 NA 1 2.0 t\n1 Q0 nan 1 1.5 t\n1 Q0 007 2 1.0 t\n")
    run = read_run(tmp_path / "r.trec")
    assert run.qid.astype(str).tolist() == ["01", "1", "1"] and run.doc_id.astype(str).tolist() == ["NA", "nan", "007"]
    (tmp_path / "q.txt").write_text("01 0 NA 1\n1 0 007 2\n")
    qrels = read_qrels(tmp_path / "q.txt")
    assert qrels.qid.astype(str).tolist() == ["01", "1"] and qrels.doc_id.astype(str).tolist() == ["NA", "007"]


def test_readers_byte_order_mark_mixed_widths_and_bad_bytes(tmp_path: Path) -> None:
    (tmp_path / "r.trec").write_bytes("\ufeffq1 Q0 a 1 1.0 t\n".encode())
    assert read_run(tmp_path / "r.trec").qid.astype(str).tolist() == ["q1"]
    (tmp_path / "q.tsv").write_bytes("\ufeffquery-id\tcorpus-id\tscore\nq1\ta\t1\n".encode())
    assert read_qrels(tmp_path / "q.tsv").qid.astype(str).tolist() == ["q1"]
    (tmp_path / "mixed.txt").write_text("q1 0 a 1\nq1 b 2\n")  # 4 and 3 fields in one file
    assert read_qrels(tmp_path / "mixed.txt").doc_id.astype(str).tolist() == ["a", "b"]
    (tmp_path / "bad.trec").write_bytes(b"q1 Q0 a 1 1.0 t\nq1 Q0 \xff 2 0.5 t\n")
    with pytest.raises(FrameValidationError, match=r"bad.trec:2: not UTF-8"):
        read_run(tmp_path / "bad.trec")
    with gzip.open(tmp_path / "cut.trec.gz", "wt") as fh:
        fh.write("q1 Q0 a 1 1.0 t\n" * 2000)
    data = (tmp_path / "cut.trec.gz").read_bytes()
    (tmp_path / "cut.trec.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(FrameValidationError, match="cut.trec.gz"):
        read_run(tmp_path / "cut.trec.gz")
    (tmp_path / "fake.trec.gz").write_text("not gzip at all\n")
    with pytest.raises(FrameValidationError, match="fake.trec.gz"):
        read_run(tmp_path / "fake.trec.gz")
    (tmp_path / "big.txt").write_text("q1 0 a 3000000000\n")
    with pytest.raises(FrameValidationError, match="int32"):
        read_qrels(tmp_path / "big.txt")


def test_parquet_inputs_are_checked(tmp_path: Path) -> None:
    pd.DataFrame({"qid": ["1"], "doc_id": ["a"]}).to_parquet(tmp_path / "q.parquet")
    with pytest.raises(FrameValidationError, match="relevance"):
        read_qrels(tmp_path / "q.parquet")
    pd.DataFrame({"qid": ["1"], "doc_id": ["a"], "score": [np.nan]}).to_parquet(tmp_path / "r.parquet")
    with pytest.raises(FrameValidationError, match="score"):
        read_run(tmp_path / "r.parquet")
    (tmp_path / "x.parquet").write_text("not parquet")
    with pytest.raises(FrameValidationError, match="x.parquet"):
        read_run(tmp_path / "x.parquet")


def test_packaged_cranfield_and_path_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cranfield ships with the package: by name from any folder; a path that does not exist says so
    and lists no dataset names; a file is not a dataset."""
    monkeypatch.chdir(tmp_path)
    ds = load_dataset("cranfield")
    assert (len(ds.corpus), len(ds.queries), len(ds.qrels), ds.name) == (1400, 225, 1612, "cranfield")
    assert set(ds.qrels.relevance) == {1, 2, 3, 4}
    for missing in ("./cranfeld", "data/cranfeld", str(tmp_path / "nope"), "~/no-such-folder-kolm"):
        with pytest.raises(KolmValueError, match="does not exist") as info:
            load_dataset(missing)
        assert "scifact" not in str(info.value)
    (tmp_path / "file.jsonl").write_text("{}")
    with pytest.raises(KolmValueError, match="is a file"):
        load_dataset("file.jsonl")
    with pytest.raises(KolmValueError, match="neither a BEIR folder.*cranfield.*scifact"):
        load_dataset("cranfeld")


@pytest.mark.slow
def test_wheel_ships_the_data_and_the_tokenizer(tmp_path: Path) -> None:
    """A wheel built from the checkout carries Cranfield, the BEIR registry and the MiniLM
    tokenizer: load_dataset("cranfield") and the ONNX route work from a wheel installed anywhere."""
    import importlib.util
    import subprocess
    import sys
    import zipfile

    if importlib.util.find_spec("wheel") is None:
        pytest.skip("the 'wheel' package is not installed")
    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(root)], check=True, capture_output=True, timeout=600)
    names = set(zipfile.ZipFile(next(tmp_path.glob("kolm_search-*.whl"))).namelist())
    for member in ("kolm_search/data/cranfield/corpus.jsonl.gz", "kolm_search/data/cranfield/queries.jsonl.gz",
                   "kolm_search/data/cranfield/qrels/test.tsv.gz", "kolm_search/data/beir.json",
                   "kolm_search/data/models/all-MiniLM-L6-v2/tokenizer.json", "kolm_search/py.typed"):
        assert member in names, member


@pytest.mark.parametrize("rank", ["0x1", "0X1F", "+0x2", "0x"])
def test_a_rank_that_is_not_a_decimal_integer_is_refused_naming_the_line(tmp_path: Path, rank: str) -> None:
    """pyarrow's integer parser takes ``0x1`` as 1; trec_eval refuses it, and so does read_run
    (integral decimals such as ``1.0`` are ranks, as the general reader documents)."""
    path = tmp_path / "run.trec"
    path.write_text(f"q1 Q0 d1 1 2.5 tag\nq1 Q0 d2 {rank} 1.5 tag\n")
    with pytest.raises(FrameValidationError, match=r"run.trec:2: rank"):
        read_run(path)


def test_ranks_read_as_their_integers(tmp_path: Path) -> None:
    path = tmp_path / "run.trec"
    path.write_text("q1 Q0 d1 7 2.5 tag\nq1 Q0 d2 007 1.5 tag\nq2 Q0 d1 -3 0.5 tag\nq2 Q0 d2 +4 0.2 tag\n"
                    "q2 Q0 d3 5.0 0.1 tag\n")
    assert read_run(path)["rank"].tolist() == [6, 6, -4, 3, 4]


@pytest.mark.parametrize("body", ["q1 Q0 d1 1 2.5 t\nq1 Q0 d2 2 1.5 t\nq2 Q0 d1 1 0.5 t\n",  # the Arrow path
                                  "q1\tQ0\td1\t1\t2.5\tt\nq1\tQ0\td2\t2\t1.5\tt\nq2\tQ0\td1\t1\t0.5\tt\n"])  # general
def test_a_run_read_back_takes_ordinary_writes(tmp_path: Path, body: str) -> None:
    # every column's data is the frame's own and writable (a read-only Arrow buffer would make a plain
    # loc write fail once nothing else references the block)
    (tmp_path / "r.trec").write_text(body)
    run = read_run(tmp_path / "r.trec")
    run.loc[0, "score"] = 9.0
    run.at[1, "rank"] = 7
    run["score"].array[2] = 4.0
    assert run["score"].tolist() == [9.0, 1.5, 4.0] and run["rank"].tolist() == [0, 7, 0]
    assert read_run(tmp_path / "r.trec")["score"].tolist() == [2.5, 1.5, 0.5]
