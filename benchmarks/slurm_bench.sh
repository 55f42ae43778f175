#!/bin/bash
# Strong-scaling sweep of gnndist over the nodes of a Slurm allocation (see docs/benchmarks.md).
#
#   sbatch --nodes 8 benchmarks/slurm_bench.sh ogbn-arxiv 1,2,4,8,16,32
#
# Every configuration runs as one `srun` of `torchrun` on the nodes it needs; partitions and
# per-epoch logs go to $SCRATCH (storage every node sees). Adjust the partition, GPUs per
# node and the virtual environment to the site.
#SBATCH --job-name=gnndist-bench
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=32
#SBATCH --time=02:00:00
#SBATCH --exclusive
set -euo pipefail

DATASET=${1:-ogbn-arxiv}
PARTS=${2:-1,2,4,8,16,32}
PER_NODE=${GPUS_PER_NODE:-4}
SCRATCH=${SCRATCH:-$HOME/scratch}
HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
OUT=$SCRATCH/gnndist-results/$(date +%F)-${SLURM_CLUSTER_NAME:-cluster}

source "${VENV:-.venv}/bin/activate"
gnndist bench strong --dataset "$DATASET" --parts "$PARTS" --per-node "$PER_NODE" \
    --work "$SCRATCH/gnndist-bench" --out "$OUT" --device cuda \
    --launcher "srun --nodes {nnodes} --ntasks-per-node 1 torchrun --nnodes {nnodes} --nproc-per-node {per_node} --rdzv-backend c10d --rdzv-endpoint $HEAD:29500"
gnndist bench peer --dataset "$DATASET" --device cuda --out "$OUT"
echo "results in $OUT: commit the folder under benchmarks/results/ and run"
echo "  gnndist bench report benchmarks/results --readme benchmarks/README.md"
