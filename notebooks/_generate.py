"""Regenerate 01_quickstart.ipynb: python notebooks/_generate.py (from the repository root)."""
import nbformat as nbf

nb = nbf.v4.new_notebook()
cells = []


def md(text):
    cells.append(nbf.v4.new_markdown_cell(text))


def code(text):
    cells.append(nbf.v4.new_code_cell(text))


md("# kolm_search quickstart\n\nRun it with `pip install -e '.[notebook]'` and "
   "`jupyter nbconvert --to notebook --execute notebooks/01_quickstart.ipynb` (or open it in Jupyter). Load a test "
   "collection, build BM25, dense and hybrid pipelines, evaluate them with "
   "trec_eval's exact semantics, compare with significance tests, and plot.\n\n"
   "The collection is Cranfield, which ships with kolm_search; any BEIR folder or BEIR dataset name works too "
   "(`load_dataset(\"scifact\")` downloads it once).")
code("""import kolm_search as ks
from kolm_search import presets
from kolm_search.io import load_dataset

dataset = load_dataset("cranfield")
dataset""")
md("## Three pipelines\n\nThe dense side uses the packaged all-MiniLM-L6-v2 when the `embeddings` or `onnx` "
   "extra is installed, otherwise LSA (truncated SVD of TF-IDF), which needs no model. The corpus is embedded "
   "once and shared by the dense and hybrid pipelines; `CachedEmbedder` keeps the vectors in "
   "`cache/embeddings.sqlite` at the repository root, the file the README's examples fill (they run from "
   "there; this notebook runs from `notebooks/`), so neither embeds Cranfield again after the other.")
code("""from pathlib import Path

from kolm_search.adapters import CachedEmbedder, LSAEmbedder, load_embedder
from kolm_search.engine.doctable import DocumentTable

# the README's examples run from the repository root and keep their files in cache/ there
CACHE = Path("..", "cache") if Path.cwd().name == "notebooks" else Path("cache")
table = DocumentTable.from_frame(dataset.corpus)
try:
    embedder = CachedEmbedder(load_embedder("auto"), CACHE / "embeddings.sqlite")
except ImportError:
    embedder = LSAEmbedder(table.texts(), n_components=256)
print(embedder)

pipelines = {
    "bm25": presets.bm25(table),
    "dense": presets.dense(table, embedder),
    "hybrid": presets.hybrid(table, embedder, k=60),
}""")
md("## One search, then a whole batch")
code("""# inside a notebook the event loop is running: await the async API (search_sync is for scripts)
response = await pipelines["hybrid"].search({"query": "boundary layer transition on a flat plate", "limit": 3})
[(d.id, round(d.score, 4), d.title) for d in response.results]""")
code("""batch = pipelines["bm25"].search_batch(dataset.judged_queries(), limit=100)
batch.run.head()""")
md("## Evaluate and compare\n\n`Experiment` runs every pipeline, caches the runs and compares them with the baseline "
   "(paired Fisher randomisation test, Holm correction).")
code("""experiment = ks.Experiment(pipelines, dataset, ["ndcg@10", "recall@100", "map"], test="fisher",
                           baseline="bm25", progress=False)
results = experiment.run()
results""")
code("""assert results.loc[(results.run == "bm25") & (results.metric == "ndcg@10"), "mean"].iloc[0] > 0.36
ks.evaluate(batch, dataset.qrels, ["ndcg@10", "bpref", "hit_rate@5"])""")
md("## Fusion by hand, and tuning it on a training split")
code("""runs = experiment.run_pipelines()
fused = ks.fuse([runs["bm25"], runs["dense"]], method="rrf", k=60)
print(ks.evaluate(fused, dataset.qrels, ["ndcg@10"]))
qids = sorted(dataset.qrels.qid.unique())
best = ks.optimize_fusion({"bm25": runs["bm25"], "dense": runs["dense"]}, dataset.qrels, "ndcg@10",
                          grid={"k": [10, 60], "weights": [[0.5, 0.5], [0.7, 0.3], [0.3, 0.7]]}, queries=qids[::2])
best["k"], best["weights"], round(best["score"], 4)""")
md("## Plot\n\nNeeds matplotlib (extra `plot`).")
code("""%matplotlib inline
fig = experiment.plot(["ndcg@10", "recall@100"])""")
nb["cells"] = cells
nb["metadata"]["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, "notebooks/01_quickstart.ipynb")
