"""The training layer: Trainer (loss, step, evaluate, fit), several runs, checkpoints, precision, metrics, reports.

    trainer.py      Trainer: global loss, all-reduced gradients, evaluation; fit() is the loop
    runs.py         fit_runs: --runs / --split / --splits on one partition, mean ± std
    checkpoint.py   checkpoints: atomic, checksummed, resumed from the newest good one
    metrics.py      evaluation metrics, exact over P ranks
    precision.py    --precision fp32|bf16|fp16: autocast, fp16's loss scale, the derived P-equality bound
    summary.py      RunSummary / Summary (to_dict() is --json), the per-epoch log
"""
