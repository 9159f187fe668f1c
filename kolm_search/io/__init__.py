"""Datasets and files: packaged collections, BEIR folders and downloads, TREC runs and qrels, parquet."""

from pathlib import Path

from kolm_search.io.beir import Dataset, load_beir
from kolm_search.io.download import beir_registry, default_cache_dir, download_beir
from kolm_search.io.trec import read_qrels, read_run, write_qrels, write_run

__all__ = [
    "Dataset",
    "beir_registry",
    "default_cache_dir",
    "download_beir",
    "load_beir",
    "load_dataset",
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


def load_dataset(name_or_path: str | Path, split: str = "test", *, cache_dir: str | Path | None = None) -> Dataset:
    """A test collection: a BEIR folder by path, a packaged collection by name (``"cranfield"``),
    or a BEIR dataset by name (downloaded and cached on first use, see :func:`download_beir`).

    A folder given by path wins over a name. An argument that looks like a path (it holds a
    separator, or starts with ``.`` or ``~``) and does not exist is reported as such; an
    unknown name is answered with the names that are known.
    """
    from kolm_search.errors import KolmTypeError, KolmValueError

    if not isinstance(name_or_path, (str, Path)):
        raise KolmTypeError(f"load_dataset takes a folder or a dataset name, got {type(name_or_path).__name__}")
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return load_beir(path, split)
    text = str(name_or_path)
    if path.exists():
        raise KolmValueError(f"{text!r} is a file; a dataset is a BEIR folder (corpus.jsonl, queries.jsonl, qrels/)")
    if isinstance(name_or_path, Path) or _looks_like_a_path(text):
        raise KolmValueError(f"dataset folder {text!r} does not exist")
    packaged = packaged_datasets()
    if text in packaged:
        return load_beir(packaged[text], split)
    if text in beir_registry():
        return load_beir(download_beir(text, cache_dir), split)
    raise KolmValueError(f"{text!r} is neither a BEIR folder nor a known dataset; packaged: {sorted(packaged)}, "
                         f"downloadable BEIR datasets: {sorted(beir_registry())}")
