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
   "collection, compose BM25, dense and reranking stages into pipelines, evaluate them with "
   "trec_eval's exact semantics, compare them in one experiment with significance tests, search a grid, and plot.\n\n"
   "The collection is Cranfield, which ships with kolm_search; any BEIR folder or BEIR dataset name works too "
   "(`load_dataset(\"scifact\")` downloads it once).")
code("""import kolm_search as ks
from kolm_search import presets
from kolm_search.io import load_dataset

dataset = load_dataset("cranfield")
dataset""")
md("## Stages\n\nEvery retriever and reranker is a `Stage`, and stages compose with PyTerrier's operators "
   "(`>>` then, `+` sum of scores, `*` weight, `%` rank cutoff, `|` `&` set union and intersection, `^` "
   "concatenation, `**` features; the README's table). The dense side uses the packaged all-MiniLM-L6-v2 when the "
   "`embeddings` or `onnx` extra is installed, otherwise LSA (truncated SVD of TF-IDF), which needs no model; "
   "`CachedEmbedder` keeps the vectors in `cache/embeddings.sqlite` at the repository root, the file the README's "
   "examples fill (they run from there; this notebook runs from `notebooks/`).")
code("""from pathlib import Path

from kolm_search import BM25Retriever, DenseRetriever, FeedbackRetriever, Fuse
from kolm_search.adapters import CachedEmbedder, LSAEmbedder, MMRReranker, load_embedder
from kolm_search.engine.doctable import DocumentTable

# the README's examples run from the repository root and keep their files in cache/ there
CACHE = Path("..", "cache") if Path.cwd().name == "notebooks" else Path("cache")
table = DocumentTable.from_frame(dataset.corpus)
try:
    embedder = CachedEmbedder(load_embedder("auto"), CACHE / "embeddings.sqlite")
except ImportError:
    embedder = LSAEmbedder(table.texts(), n_components=256)
print(embedder)

bm25 = BM25Retriever(table)
dense = DenseRetriever(table, embedder)
first = bm25 % 100                                           # BM25's 100 best
reranked = first >> MMRReranker(embedder, lambda_=0.8)       # re-ranked by MMR
three = Fuse(first, dense % 100, FeedbackRetriever(bm25, "bo1") % 100, k=60)  # RRF of three stages
three""")
md("## One search, then a whole batch\n\nA stage called on queries returns the run; in a `SearchClient` it serves "
   "the spec's API (`presets.hybrid` is `Fuse(bm25, dense)` in a client).")
code("""client = ks.SearchClient({"planner": ks.DefaultQueryPlanner(), "retriever": three, "embedder": embedder})
# inside a notebook the event loop is running: await the async API (search_sync is for scripts)
response = await client.search({"query": "boundary layer transition on a flat plate", "limit": 3})
print([(d.id, round(d.score, 4), d.title) for d in response.results])
reranked(dataset.judged_queries(), limit=100).head()""")
md("## An experiment of five pipelines sharing one first stage\n\n`Experiment` runs BM25 once for the five "
   "(equal prefixes are found by fingerprint), compares them with the baseline (paired Fisher randomisation test, "
   "Holm correction); with `cache_dir=` every stage's output is kept on disk, so running it again runs nothing.")
code("""pipelines = {
    "bm25": first,
    "mmr 0.8": reranked,
    "mmr 0.6": first >> MMRReranker(embedder, lambda_=0.6),
    "bm25 + dense": first + 4 * (dense % 100),
    "rrf of three": three,
}
experiment = ks.Experiment(pipelines, dataset, ["ndcg@10", "recall@100", "map"], test="fisher",
                           baseline="bm25", progress=False)
results = experiment.run()
print("BM25 runs:", sum(n for fp, n in experiment.shared.computed.items() if fp.startswith("BM25Retriever")))
results""")
code("""assert results.loc[(results.run == "bm25") & (results.metric == "ndcg@10"), "mean"].iloc[0] > 0.36
ks.evaluate(experiment.runs["rrf of three"], dataset.qrels, ["ndcg@10", "bpref", "hit_rate@5"])""")
md("## A grid search\n\nEvery point of the grid is scored (the first stage runs once for all of them), and "
   "with `folds` the choice is also made by cross-validation over queries, which gives its held-out score.")
code("""from kolm_search.evaluation import grid_search

found = grid_search(reranked, {"right__lambda_": [0.6, 0.8, 0.9, 1.0]}, dataset.judged_queries(), dataset.qrels,
                    "ndcg@10", folds=5)
print(found.best_params, round(found.best_score, 4), "held out:", round(found.held_out_score, 4))
found.table""")
md("## Fusion of runs, and tuning it on a training split")
code("""runs = experiment.run_pipelines()
qids = sorted(dataset.qrels.qid.unique())
best = ks.optimize_fusion({"bm25": runs["bm25"], "rrf": runs["rrf of three"]}, dataset.qrels, "ndcg@10",
                          grid={"k": [10, 60], "weights": [[0.5, 0.5], [0.7, 0.3], [0.3, 0.7]]}, queries=qids[::2])
best["k"], best["weights"], round(best["score"], 4)""")
md("## Plot\n\nNeeds matplotlib (extra `plot`).")
code("""%matplotlib inline
fig = experiment.plot(["ndcg@10", "recall@100"])""")
nb["cells"] = cells
nb["metadata"]["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, "notebooks/01_quickstart.ipynb")
