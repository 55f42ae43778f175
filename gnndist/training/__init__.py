"""The training layer: Trainer (loss, step, evaluate, fit), several runs, checkpoints, metrics, the run's report.

    trainer.py      Trainer: global loss, all-reduced gradients, evaluation; fit() is the loop
    runs.py         fit_runs: --runs / --split / --splits on one partition, mean ± std
    checkpoint.py   checkpoints: atomic, checksummed, resumed from the newest good one
    metrics.py      evaluation metrics, exact over P ranks
    summary.py      RunSummary / Summary (to_dict() is --json), the per-epoch log
"""
