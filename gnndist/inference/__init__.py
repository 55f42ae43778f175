"""A trained model used: applied to the whole graph on every rank, or written out as a plain or PyG model.

    predict.py   ``gnndist predict``: the rank body and its request
    export.py    ``gnndist export``: a plain model file, or a PyG model (a twin in ``gnndist.pyg_twins``)
"""
