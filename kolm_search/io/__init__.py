"""Datasets and files: packaged collections, BEIR folders and downloads, ir_datasets, TREC runs and
qrels, parquet."""

from pathlib import Path

import pandas as pd

from kolm_search.io.beir import Dataset, load_beir, load_beir_qrels
from kolm_search.io.download import beir_registry, default_cache_dir, download_beir
from kolm_search.io.irds import load_irds
from kolm_search.io.trec import read_qrels, read_run, write_qrels, write_run

__all__ = [
    "Dataset",
    "beir_registry",
    "default_cache_dir",
    "download_beir",
    "load_beir",
    "load_dataset",
    "load_irds",
    "load_qrels",
    "packaged_datasets",
    "read_qrels",
    "read_run",
    "write_qrels",
    "write_run",
]


def packaged_datasets() -> dict[str, Path]:
    """Name -> folder of the test collections that ship inside the package (BEIR layout,
    gzip-compressed): ``cranfield`` (1,400 aeronautics abstracts, 225 queries, graded qrels)."""
    from importlib import resources

    root = Path(str(resources.files("kolm_search").joinpath("data")))
    return {p.name: p for p in sorted(root.iterdir()) if p.is_dir() and (p / "qrels").is_dir()}


def _looks_like_a_path(text: str) -> bool:
    return any(sep in text for sep in ("/", "\\")) or text.startswith((".", "~")) or text.endswith((".json", ".jsonl", ".tsv"))


def load_dataset(name_or_path: str | Path, split: str | None = None, *, cache_dir: str | Path | None = None) -> Dataset:
    """A test collection: a BEIR folder by path, a packaged collection by name (``"cranfield"``),
    a BEIR dataset by name (downloaded and cached on first use, see :func:`download_beir`), or
    an ir_datasets id (``"irds:beir/scifact/test"``, or without the prefix when it is none of
    the former: ``"vaswani"``, ``"beir/arguana"``; extra ``irds``, see :func:`load_irds`).

    ``split`` picks the qrels of a BEIR folder (default ``"test"``) and is appended to an
    ir_datasets id (``load_dataset("irds:beir/quora", "dev")``). A folder given by path wins
    over a name, a packaged or BEIR name over an ir_datasets id. An argument that looks like a
    path (it holds a separator, or starts with ``.`` or ``~``) and is neither a folder nor an
    ir_datasets id is reported as missing; an unknown name is answered with the known ones.
    Datasets of BEIR get :attr:`Dataset.drop_self_hits` (BEIR's evaluation drops a document
    whose id is the query's).
    """
    where, what = _resolve(name_or_path, split, cache_dir)
    return load_irds(str(what), split) if where == "irds" else load_beir(what, split or "test")


def load_qrels(name_or_path: str | Path, split: str | None = None, *, cache_dir: str | Path | None = None
               ) -> pd.DataFrame:
    """Qrels from a file (TREC, BEIR tsv, ``.gz``, parquet: :func:`read_qrels`) or of a dataset
    named as :func:`load_dataset` takes it (a BEIR folder, a packaged or BEIR name, an ir_datasets
    id), reading only its qrels where the layout allows (BEIR folders): what the command line's
    ``--qrels`` takes."""
    if isinstance(name_or_path, (str, Path)) and Path(name_or_path).expanduser().is_file():
        return read_qrels(Path(name_or_path).expanduser())
    where, what = _resolve(name_or_path, split, cache_dir)
    return load_irds(str(what), split).qrels if where == "irds" else load_beir_qrels(what, split or "test")


def _resolve(name_or_path: str | Path, split: str | None, cache_dir: str | Path | None) -> tuple[str, str | Path]:
    """``("folder", path)`` of a BEIR folder (downloaded if need be) or ``("irds", id)``."""
    from kolm_search.errors import KolmTypeError, KolmValueError
    from kolm_search.io.irds import is_irds_id

    if not isinstance(name_or_path, (str, Path)):
        raise KolmTypeError(f"load_dataset takes a folder or a dataset name, got {type(name_or_path).__name__}")
    if split is not None and not isinstance(split, str):
        raise KolmTypeError(f"split must be a string, got {type(split).__name__}")
    text = str(name_or_path)
    if isinstance(name_or_path, str) and text.startswith("irds:"):
        return "irds", text.removeprefix("irds:")
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return "folder", path
    if path.exists():
        raise KolmValueError(f"{text!r} is a file; a dataset is a BEIR folder (corpus.jsonl, queries.jsonl, qrels/)")
    packaged = packaged_datasets()
    if isinstance(name_or_path, str):
        if text in packaged:
            return "folder", packaged[text]
        if text in beir_registry():
            return "folder", download_beir(text, cache_dir)
        maybe_irds = not text.startswith((".", "~", "/")) and "\\" not in text and ":" not in text
        if maybe_irds and (is_irds_id(text) or (split is not None and is_irds_id(f"{text}/{split}"))):
            return "irds", text
    else:
        maybe_irds = False
    if isinstance(name_or_path, Path) or _looks_like_a_path(text):
        hint = ("; if it is an ir_datasets id, install the extra irds (pip install 'kolm-search[irds]') or check "
                "the id (see https://ir-datasets.com)") if maybe_irds else ""
        raise KolmValueError(f"dataset folder {text!r} does not exist{hint}")
    raise KolmValueError(f"{text!r} is neither a BEIR folder nor a known dataset; packaged: {sorted(packaged)}, "
                         f"downloadable BEIR datasets: {sorted(beir_registry())}, or an ir_datasets id "
                         f"('irds:<id>', extra irds)")
