"""Hostile probes of a quick load's postings gate (:mod:`kolm_search.retrievers.postings_gate`):
a damaged index, its manifest resealed, loaded quickly, must fail with ``KolmValueError``
naming the file and position through every public path that reads the damage, never answer
as if the damage were not there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kolm_search import BM25Retriever, KolmValueError
from tests.conftest import synthetic_corpus
from tests.reliability.indexes import ROOT, file_of, reseal, save_synthetic_bm25


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_synthetic_bm25(tmp_path_factory.mktemp("probes") / "i", 400, 60, seed=5)


def _copy(saved: Path, tmp_path: Path) -> tuple[Path, BM25Retriever]:
    d = tmp_path / "bad"
    shutil.copytree(saved, d)
    return d, BM25Retriever.load(saved, verify="full")


@pytest.mark.parametrize("verify", ["full", "quick"])
def test_a_wide_document_row_that_an_int32_cast_would_wrap_into_range_is_refused(saved: Path, tmp_path: Path,
                                                                                 verify: str) -> None:
    """Rows saved as int64 (any integer dtype loads): row ``2**32 + r`` must not become row ``r``."""
    d, ref = _copy(saved, tmp_path)
    t = ref._vocab_index["w1"]
    pos = int(ref.t_ptr[t]) + 1
    path = file_of(d, "t_docs")
    a = np.load(path).astype(np.int64)
    a[pos] += 2**32  # wraps to the row it was: the int32 postings would look sound
    np.save(path, a)
    reseal(d)
    with pytest.raises(KolmValueError, match=rf"t_docs\.[0-9a-f]{{32}}\.npy: document row {a[pos]} at position {pos}"):
        ret = BM25Retriever.load(d, verify=verify)  # type: ignore[arg-type]
        ret.score_texts(["w1"], 10)


def test_a_pickle_taken_while_a_search_checks_a_term_never_carries_it_checked_without_its_bounds(
        saved: Path) -> None:
    """A pickler that runs Python code per object (cloudpickle's ``reducer_override``, what Dask
    ships retrievers with) lets another thread run between two arrays of the gate's state: here
    a search checks a term just after the bounds were written out and before the checked flags
    were. The copy must then recheck that term, not read bounds it never received."""
    import io
    import pickle

    full = BM25Retriever.load(saved, verify="full")
    quick = BM25Retriever.load(saved, verify="quick")
    gate = quick._postings_gate
    assert gate is not None
    words = "w1 w2"
    t = quick._vocab_index["w1"]
    last = gate.bounds["b_last"]

    class Interleaved(pickle.Pickler):
        def reducer_override(self, obj: object) -> object:
            if obj is last:  # the other thread's search, between the bounds and the flags
                quick.score_texts([words], 10)
            return NotImplemented

    buf = io.BytesIO()
    Interleaved(buf).dump(quick)
    back = pickle.loads(buf.getvalue())
    assert gate._checked[t]
    back_gate = back._postings_gate
    assert back_gate is not None
    if back_gate._checked[t]:  # carried as checked: its bounds must have come with it
        assert back._t_max[t] == full.t_max[t]
    texts = [words, "w2 w1 w3", "w1 w9", "w1"]
    for k in (1, 3, 10):
        for x, y in zip(back.score_texts(texts, k), full.score_texts(texts, k), strict=True):
            assert np.array_equal(x, y)


def test_the_gate_checks_the_very_postings_the_kernels_read_before_and_after_a_pickle(saved: Path) -> None:
    """One array, not a view beside the gate's: a pickle (Dask) then carries the postings once,
    and the copy's gate checks the buffer its searches read, not a second copy of it."""
    import pickle

    quick = BM25Retriever.load(saved, verify="quick")
    for ret in (quick, pickle.loads(pickle.dumps(quick))):
        gate = ret._postings_gate
        assert gate is not None
        assert ret._t_docs is gate._t_docs and ret._t_w is gate._t_w
    full = BM25Retriever.load(saved, verify="full")
    extra = len(pickle.dumps(quick)) - len(pickle.dumps(full))  # the gate's flags, bounds and maxima only
    assert extra < quick._t_docs.nbytes


def test_term_bounds_computed_while_the_gate_finishes_are_not_kept(saved: Path) -> None:
    """The weighted path's overflow bounds (``t_max + |nonocc|``) read while some terms were
    unchecked (their ``t_max`` 0) must not be cached because the gate finished meanwhile (another
    thread's whole check, here run from inside the read): a later query of such a term would
    pass the overflow check with a bound of 0 and score infinity."""
    quick = BM25Retriever.load(saved, verify="quick")
    nonocc = np.asarray(quick.nonocc)

    class Meanwhile:  # nonocc as read by _term_bounds: the whole check runs in between
        ran = False

        def __array__(self, dtype: object = None, copy: object = None) -> np.ndarray:
            if not self.ran:
                self.ran = True
                quick.b_max  # noqa: B018 - the public arrays: every term checked
            return nonocc if dtype is None else nonocc.astype(dtype)  # type: ignore[arg-type]

        def __getitem__(self, key: object) -> np.ndarray:
            return nonocc[key]  # type: ignore[index]

    quick.score_terms([{"w1": 1.0}], 5)  # w1 checked, the others not
    quick.nonocc = Meanwhile()  # type: ignore[assignment]
    quick.score_terms([{"w1": 1.0}], 5)
    gate = quick._postings_gate
    assert gate is not None and gate.done
    t = quick._vocab_index["w2"]
    weight = float(np.float32(2e38) / max(float(quick._t_max[t]), 1e-30))  # score = weight * t_max: above 1.7e38
    with pytest.raises(KolmValueError, match="'w2' has weight"):
        quick.score_terms([{"w2": min(weight, 3e38)}], 5)


_CHILD = """
import json, pickle, sys
from pathlib import Path
from kolm_search import BM25Retriever
from kolm_search.errors import KolmError
from kolm_search.recipes import presets
from kolm_search.retrievers.composite import CompositeRetriever
from kolm_search.retrievers.feedback import FeedbackRetriever
from kolm_search.retrievers.ltr_terms import TermPairs
from kolm_search.engine.candidate_frame import QueryBatch
root = Path(sys.argv[1])
bm25 = lambda: BM25Retriever.load(root / "bm25", verify="quick")
import numpy as np
batch = lambda text: QueryBatch([text], np.zeros(1, np.int64), 1, 10, [{}])
def ltr():  # candidates of a sound term; the pair feature's document frequencies read w1's postings
    ret = bm25()
    return TermPairs(ret, weighting="bm25").feature(batch("w1 w3"), ret.retrieve_batch(batch("w3 w5")))
paths = {
    "search": lambda: bm25().score_texts(["w1 w2"], 5),
    "client": lambda: presets.bm25(bm25()).search_batch(["w3 w1"]),
    "pickled": lambda: pickle.loads(pickle.dumps(bm25())).score_terms([{"w1": 1.0}], 5),
    "rm3": lambda: FeedbackRetriever(bm25(), "rm3").expand(["w3"]),
    "feedback_saved": lambda: FeedbackRetriever.load(root / "feedback", verify="quick").expand(["w3"]),
    "composite": lambda: CompositeRetriever.load(root / "composite", verify="quick").retrieve_batch(batch("w1")),
    "ltr_pairs": ltr,
}
for name, run in paths.items():
    try:
        run()
        out = {"path": name, "status": "answered"}
    except KolmError as exc:
        out = {"path": name, "status": "kolm", "error": str(exc)}
    except BaseException as exc:
        out = {"path": name, "status": "other", "error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(out), flush=True)
"""


def test_every_public_reader_of_a_damaged_term_fails_with_its_file_and_position(tmp_path: Path) -> None:
    """A row far outside the table in term ``w1``: the search, a client, a pickled copy, RM3
    (in memory and saved), a saved composite and the LTR pair feature, quickly loaded in a
    child process (a kernel reading the row could crash it), each raise naming the file and
    position; none answers and none crashes."""
    from kolm_search.retrievers.composite import CompositeRetriever
    from kolm_search.retrievers.feedback import FeedbackRetriever

    texts = synthetic_corpus(300, 40, seed=9)
    ret = BM25Retriever([{"id": f"d{i}", "content": t} for i, t in enumerate(texts)])
    t = ret._vocab_index["w1"]
    pos = int(ret.t_ptr[t]) + 1
    for name, obj, key in (("bm25", ret, "t_docs"), ("feedback", FeedbackRetriever(ret, "rm3"), "0.t_docs"),
                           ("composite", CompositeRetriever([ret, BM25Retriever(ret.table, k1=0.9)], 10), "0.t_docs")):
        obj.save(tmp_path / name)
        path = file_of(tmp_path / name, key)
        a = np.load(path).copy()
        a[pos] = 2**30
        np.save(path, a)
        reseal(tmp_path / name)
    done = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["path"] for r in records] == ["search", "client", "pickled", "rm3", "feedback_saved", "composite",
                                            "ltr_pairs"]
    for r in records:
        assert r["status"] == "kolm", r
        assert f"document row {2**30} at position {pos}" in r["error"], r


def test_the_whole_check_reads_what_the_kernels_read_after_the_folder_was_saved_again(saved: Path,
                                                                                       tmp_path: Path) -> None:
    """A quick load maps its files; a save of another index into the same folder (all or
    nothing, another process's update) then removes them by name. The whole check that a
    save, an update or the public arrays run later checks the mapped postings the index
    searches, not files by a name that no longer holds them (was: FileNotFoundError)."""
    d = tmp_path / "i"
    shutil.copytree(saved, d)
    quick = BM25Retriever.load(d, verify="quick")
    quick.score_texts(["w1"], 5)  # part checked
    want = BM25Retriever.load(saved, verify="full")
    BM25Retriever([{"id": "x", "content": "other words"}]).save(d)  # the folder's new index
    for name in ("t_docs", "t_w", "t_min", "t_max", "b_max", "b_last"):
        assert np.array_equal(getattr(quick, name), getattr(want, name))
    quick.save(tmp_path / "copy")
    texts = ["w1 w2", "w7 w30", "w59"]
    for x, y in zip(BM25Retriever.load(tmp_path / "copy", verify="full").score_texts(texts, 10),
                    want.score_texts(texts, 10), strict=True):
        assert np.array_equal(x, y)


_REPLACED = """
import os, sys
from pathlib import Path
from kolm_search import BM25Retriever, KolmValueError
bad, good = Path(sys.argv[1]), Path(sys.argv[2])
quick = BM25Retriever.load(bad, verify="quick")  # maps the damaged postings
os.replace(good, bad / good.name)  # a sound file now has their name (a repair copied over the folder)
try:
    quick.t_max  # the whole check: of the mapped postings, which every search reads
except KolmValueError as exc:
    print("refused:", exc)
quick.score_texts(["w1"], 10)  # never reached unchecked: the same error
"""


def test_the_whole_check_refuses_the_mapped_damage_though_a_sound_file_took_its_name(saved: Path,
                                                                                       tmp_path: Path) -> None:
    d, ref = _copy(saved, tmp_path)
    t = ref._vocab_index["w1"]
    pos = int(ref.t_ptr[t]) + 1
    path = file_of(d, "t_docs")
    sound = tmp_path / path.name
    shutil.copy(path, sound)
    a = np.load(path).copy()
    a[pos] = 2**30
    np.save(path, a)
    reseal(d)
    done = subprocess.run([sys.executable, "-c", _REPLACED, str(d), str(sound)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr[-2000:])  # not a crash, not an answer
    assert f"refused: {path}: document row {2**30} at position {pos}" in done.stdout
    assert done.stderr.rstrip().splitlines()[-1].startswith("kolm_search.errors.KolmValueError: ")


@pytest.mark.parametrize("name", ["weights", "offsets"])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf, 1e39])
def test_score_encoded_refuses_non_finite_weights_and_offsets(name: str, value: float) -> None:
    ret = BM25Retriever([{"id": f"d{i}", "content": t} for i, t in enumerate(["alpha beta", "beta gamma",
                                                                                   "gamma alpha alpha"])])
    q_ptr, q_ids = ret.encode(["alpha beta", "gamma"])
    arrays = {"weights": np.ones(len(q_ids)), "offsets": np.zeros(2)}
    arrays[name][1] = value  # 1e39 overflows float32
    with pytest.raises(KolmValueError, match=rf"{name}\[1\] is -?inf|{name}\[1\] is nan"):
        ret.score_encoded(q_ptr, q_ids, 3, **{name: arrays[name]})
    ok = ret.score_encoded(q_ptr, q_ids, 3, weights=np.ones(len(q_ids)), offsets=np.zeros(2))
    assert ok[2].tolist() == [3, 2]
