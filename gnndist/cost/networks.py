"""The cost model's machine constants: :class:`Network`, the ``--network`` presets and the model's measured error.

A probe (:mod:`gnndist.dist.probe`) measures every constant on the machine at hand; the presets are
order-of-magnitude targets for ``gnndist simulate`` and ``--network``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from gnndist.errors import UserError


@dataclass(frozen=True)
class Network:
    """Machine constants of the model.

    Attributes:
        name: preset name, or ``"probe"`` when measured.
        alpha: seconds per message (latency per peer).
        beta: bytes per second a rank can send (and receive) at once.
        gamma_sparse: seconds per nonzero per feature column of an SpMM.
        gamma_dense: seconds per dense floating-point operation.
        overhead: seconds per collective call, whatever its peers (launch and synchronisation).
        gamma_elem: seconds per element of an elementwise pass over activations (dropout, bias, activation,
            scaling and their backward; see :data:`~gnndist.cost.times.ELEMENTWISE_IN` and ``ELEMENTWISE_OUT``).
        step_overhead: seconds of a tiny training step (a 2-layer MLP on 8 rows: loss, optimiser, autograd and
            Python dispatch); a step's fixed cost is :data:`~gnndist.cost.times.STEP_FIXED` + ``LAYER_FIXED`` per
            layer of these.
        beta_host: bytes per second one host's link carries each way between hosts, all its ranks together (a job
            on several hosts; ``beta`` is then a rank's rate within its host); 0: one level, ``beta`` for every byte.
        alpha_host: seconds per message to a rank of another host (a job on several hosts; ``alpha`` is then a
            message's within its host); 0: ``alpha`` for every message.
    """

    name: str
    alpha: float
    beta: float
    gamma_sparse: float
    gamma_dense: float
    overhead: float = 0.0
    gamma_elem: float = 0.0
    step_overhead: float = 0.0
    beta_host: float = 0.0
    alpha_host: float = 0.0

    def as_dict(self) -> dict:
        """The constants by name (JSON-able; ``gnndist bench`` models its rows from them)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def constants(cls) -> list[str]:
        """The names of the machine constants (every field but ``name``)."""
        return [f.name for f in fields(cls) if f.name != "name"]

    @classmethod
    def from_values(cls, name: str, values, prefix: str = "") -> Network:
        """The network ``name`` with each constant ``c`` read as ``float(values[prefix + c])`` (a probe file's
        entry; a bench row's ``net_*`` columns); ``beta_host`` and ``alpha_host``, which older ones lack, are 0 where
        missing."""
        optional = {"beta_host": 0.0, "alpha_host": 0.0}
        return cls(name, **{c: float(values[prefix + c] if prefix + c in values or c not in optional
                                     else optional[c]) for c in cls.constants()})


# The model's relative error on measured epochs (|modelled / measured - 1|, the median over the validation
# grid of benchmarks/README.md, "Cost model": 66 runs on a quiet 2-core CPU, probed constants): `gnndist
# simulate` prints it as the band of its times, and `auto` times candidates modelled within it of each other
# instead of trusting the model. Measured on that machine only; on GPUs the model is not yet calibrated.
MODEL_ERROR = 0.09
MODEL_ERROR_WORST = 0.31  # the worst case of that grid

# Targets for `gnndist simulate` and `--network`: order-of-magnitude constants, not measurements.
# An all-to-all posts its messages at once, so a peer costs a per-message overhead (alpha), and
# the latency and synchronisation of the collective are paid once per call (overhead).
NETWORKS: dict[str, Network] = {
    # GPUs of one node over NVLink (H100/H200 class: ~150 GB/s per GPU achieved in all-to-all)
    "nvlink": Network("nvlink", alpha=1e-6, beta=150e9, gamma_sparse=4e-12, gamma_dense=2e-14, overhead=15e-6),
    # GPUs across nodes, one 200 Gb/s InfiniBand/RoCE port per GPU
    "ib": Network("ib", alpha=2e-6, beta=25e9, gamma_sparse=4e-12, gamma_dense=2e-14, overhead=20e-6),
    # CPU ranks over 10 Gb/s Ethernet
    "ethernet": Network("ethernet", alpha=20e-6, beta=1.25e9, gamma_sparse=1e-9, gamma_dense=1e-11, overhead=100e-6),
}


def network(name: str, alpha: float | None = None, beta: float | None = None) -> Network:
    """A preset by name (``--network``), with ``alpha``/``beta`` overridden where given."""
    if name not in NETWORKS:
        raise UserError(f"unknown --network {name!r}; choose from {', '.join(sorted(NETWORKS))} or probe")
    net = NETWORKS[name]
    if alpha is not None:
        net = replace(net, alpha=alpha)
    if beta is not None:
        net = replace(net, beta=beta)
    return net
