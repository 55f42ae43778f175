"""The training layer: Trainer (step, evaluate, fit), several runs, checkpoints, precision, reports.

    trainer.py      Trainer: the task's global loss, all-reduced gradients, evaluation; fit() is the loop
    runs.py         fit_runs: --runs / --split / --splits on one partition, mean ± std
    checkpoint.py   checkpoints: atomic, checksummed, resumed from the newest good one
    adam.py         Adam as torch.optim.Adam computes it, bit for bit, without importing torch._dynamo
    precision.py    --precision fp32|bf16|fp16: autocast, fp16's loss scale, the derived P-equality bound
    summary.py      RunSummary / Summary (to_dict() is --json), the per-epoch log

The metrics are the tasks' (:mod:`gnndist.tasks.metrics`): ``training`` imports ``tasks``, never the reverse.
"""
