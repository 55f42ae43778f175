"""Dataset registry: every graph comes out as one cleaned `torch_geometric.data.Data`.

    load(dataset, root=None, format=None, seed=0) -> Data
    dataset_spec(name_or_path) -> DatasetSpec | None  (its loader, sources, task, metric, recipe; None: a user's file)
    register(name, loader, **declared)              (a dataset, beside its loader; register_format for a file format)
    names() -> list[str]; default_root() -> str     ($GNNDIST_DATA, else ~/.cache/gnndist)
    synthetic(num_nodes, avg_degree=10, num_classes=8, num_features=64, seed=0, **kw) -> Data
    validate(data) -> None                           (raises UserError)
    write_ogb(data, root, name) -> folder            (OGB's raw layout, loadable offline)

Contract of every `Data`: ``x`` float32 [N, F]; ``y`` int64 [N] (``-1`` = unlabelled,
never inside a mask); ``edge_index`` int64 [2, E], symmetric, no self-loops, no
duplicates, sorted by (row, col) (a ``.npy`` folder's is its raw edge list, ``data.raw_edges = True``:
the partitioner cleans it in chunks); ``train_mask/val_mask/test_mask`` bool [N];
``data.name``; ``data.num_classes``. A registered dataset missing from the data root is downloaded from
its public source on first use (download.py; ``GNNDIST_MIRROR``, ``GNNDIST_OFFLINE=1``: docs/downloads.md);
offline, the missing file raises `UserError` naming the expected path and where to get it.

Modules, one per format:

    spec.py       DatasetSpec (loader, source files with sha256, licence, citation, task, metric, recipe, typed),
                  the registry of datasets and formats: each loader module registers its own
    registry.py   `load`: a name through its spec's loader, a path through its detected format
    download.py   `fetch`: a registered dataset's source files, checked, atomic, one process per data root (flock)
    planetoid.py  cora/citeseer/pubmed via PyG Planetoid (public split); Cora is bundled
    npz.py        Amazon/Coauthor (PyG raw or GraphGallery npz), BlogCatalog/Flickr/DBLP,
                  heterophily benchmark npz (every shipped split: train_masks [N, K]; split 0 current)
    ogb.py        ogbn-* via PygNodePropPredDataset (official split; ogbn-mag: typed); write_ogb
    hetero.py     typed graphs as one union graph + HeteroSchema: a saved HeteroData, synthetic-mag-<N>,
                  <dataset>-paper-word (feature columns as a featureless word type)
    schema.py     HeteroSchema, a typed graph's schema: data.hetero (schema_of), graph.hetero; META.json's form
                  (to/from_meta)
    snap.py       SNAP .jlg and text edge lists (structure only)
    social.py     Facebook Page-Page (MUSAE) and Facebook100 .mat
    pyg_file.py   a torch.save'd Data (weights_only)
    npy_folder.py a folder of memory-mapped .npy arrays (edge_index [2, E] raw int32/int64, x, y, masks)
                  for graphs beyond memory
    sbm.py        degree-corrected SBM, ``synthetic-<N>[k|m][-d<avg degree>]``: one seeded stream, gathered
                  in memory (`synthetic`) or written to a .npy folder in chunks (write_synthetic)
    split.py      seeded 20-per-class train / 30-per-class val / rest test; K splits (set_splits,
                  add_random_splits: seeds split_seed .. split_seed + K - 1)
    graph.py      edge cleaning and Data assembly;  contract.py  validate(): the contract check

Decisions:

* Datasets without a shipped split get the seeded 20/30-per-class split.
* Structure-only graphs (edge lists): ``x = [1, log(1 + degree)]``, ``y`` all 0,
  ``num_classes = 1`` and ``data.has_labels = False``; no labels are invented.
* ``ogbn-proteins``: ``x`` = mean of a node's 8-dim edge features, ``y`` int64
  [N, 112] 0/1 with ``data.multilabel = True`` and ``num_classes = 112``.
* ``ogbn-papers100M``: unlabelled nodes (NaN in OGB) get ``y = -1``.
* 1-based labels (BlogCatalog, Flickr) are shifted to 0-based.
* ``synthetic-<N>`` uses average degree 50: ``synthetic-2m`` has ~2M nodes and ~50M
  undirected edges; ``synthetic-2m-d20`` picks another degree. A name is generated once into
  ``<root>/synthetic/synthetic-<N>-d<deg>-s<seed>/`` and loads as that ``.npy`` folder: the graph of
  ``gnndist synth NAME --out DIR`` and of ``synthetic(N, avg_degree=deg, seed=seed)`` (cleaned), and
  a name partitions at its folder's peak.
"""

# the built-in datasets and formats: each loader module registers its own (spec.register) when imported; they import
# torch, and torch_geometric, pandas or scipy only where they read a file
from . import hetero, npy_folder, npz, ogb, ogbl, planetoid, pyg_file, sbm, snap, social  # noqa: F401
from .contract import validate
from .ogb import write_ogb
from .registry import load
from .root import default_root
from .sbm import synthetic
from .spec import dataset_spec, names, register, register_format

__all__ = ["dataset_spec", "default_root", "load", "names", "register", "register_format", "synthetic", "validate",
           "write_ogb"]
