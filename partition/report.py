"""The partition's report: volume and balance against the random baseline, the modelled epoch, who chose and how.

:func:`quality` writes it (the pipeline's renumber stage, off the original ids), :func:`format_report`
prints it (``gnndist partition``, ``gnndist info``). A report carries ``report_version``
(:data:`REPORT_VERSION`); one written by an older gnndist, without it, prints as one line.
"""

from __future__ import annotations

import numpy as np
from gnndist.partition.backends import backend
from gnndist.partition.balance import imbalance
from gnndist.partition.book import GlobalCSR, PartitionBook, comm_volume
from gnndist.partition.choose import Assigned, PartitionRequest
from gnndist.partition.hetero import format_hetero
from gnndist.partition.metis import metis_library, random_assign

from gnndist.cost import RankLoad, epoch_time

REPORT_VERSION = 1  # every field format_report prints is there; older reports lack some


def quality(req: PartitionRequest, csr: GlobalCSR, made: Assigned, book: PartitionBook, loads: list[RankLoad],
            cut: int) -> dict:
    """The report of parts ``made`` (``csr`` in original ids; ``loads`` [P] of the 1D halo exchange, ``cut``
    edges): volume and balance against the random baseline, the modelled epoch, the backend and its choice."""
    parts, n = req.parts, csr.num_nodes
    n_halo = np.array([ld.expand_recv for ld in loads])  # [P] halo rows = rows received
    sent = np.array([ld.expand_send for ld in loads])
    vol = int(n_halo.sum())
    random_vol = vol if req.method == "random" else comm_volume(csr, random_assign(n, parts, req.seed), parts,
                                                                 req.threads, req.chunk)
    n_owned = np.diff(book.offsets)
    nnz = np.array([ld.nnz for ld in loads])
    return {
        "report_version": REPORT_VERSION,
        **_backend_fields(req, made, csr.nnz),
        "num_nodes": n, "num_edges": int(csr.nnz // 2),
        "edge_cut": cut,
        "comm_volume": int(vol),
        "random_comm_volume": int(random_vol),
        "vs_random": float(vol / random_vol) if random_vol else 1.0,
        "max_send_volume": int(sent.max()),
        "max_recv_volume": int(n_halo.max()),
        "max_send_over_mean": imbalance(sent.astype(float)),
        "max_recv_over_mean": imbalance(n_halo.astype(float)),
        "modelled_epoch_s": epoch_time(loads, req.widths, req.net),
        "halo_fraction": [float(h / o) if o else 0.0 for h, o in zip(n_halo, n_owned)],
        "nodes_per_part": n_owned.tolist(),
        "peers_per_part": [ld.messages for ld in loads],  # ranks each exchanges halo rows with
        "imbalance": {
            "nodes": imbalance(n_owned.astype(float)),
            "edges": imbalance(nnz.astype(float)),
            "train": imbalance(np.bincount(made.assign, weights=made.train, minlength=parts)),
        },
        "assign_seconds": round(made.seconds, 3),
        **_determinism(made.backend, req.threads, csr.nnz),
        "metis_lib": metis_library(csr.nnz) if made.backend == "metis" else None,
        "cost_model": {"network": req.net.name, "widths": list(req.widths)},
        **made.fields,
    }


def _backend_fields(req: PartitionRequest, made: Assigned, nnz: int) -> dict:
    """Who made the parts: the method asked, the backend, its library and objective, how it ran
    (:meth:`~gnndist.partition.backends.Backend.report_fields`), the seed and the balance."""
    balanced = made.backend != "random"
    b, s = backend(made.backend), made.setting
    return {
        "parts": req.parts, "method": req.method, "backend": made.backend, "library": b.library(nnz),
        "objective": made.objective if made.backend == "metis" else (b.objective if balanced else None),
        "seed": req.seed, "balance": list(s.constraints) if balanced else [],
        "tolerances": dict(zip(s.constraints, s.tolerances)) if balanced else {},
        **b.report_fields(nnz),  # how the backend ran: KaMinPar's preset and why
    }


def _determinism(chosen: str, threads: int, nnz: int) -> dict:
    """The report's ``threads`` (of the backend that made the parts), ``deterministic`` and why."""
    b = backend(chosen)
    repeat, why = b.determinism(b.threads_used(threads), nnz)
    return {"threads": b.threads_used(threads), "threads_given": threads, "deterministic": repeat, "determinism": why}


def format_report(r: dict) -> str:
    """Human-readable multi-line partition report (one line for a report written before :data:`REPORT_VERSION`)."""
    if "report_version" not in r:
        return (f"partition: {r.get('parts', '?')} parts, method {r.get('method', '?')}: made by an older gnndist; "
                "re-partition for the full report")
    lines = _quality_lines(r) + _choice_lines(r)
    if r.get("hetero"):
        lines.extend(format_hetero(r["hetero"]))
    return "\n".join(lines + _refine_lines(r.get("refine")))


def _quality_lines(r: dict) -> list[str]:
    """Who made the parts, the graph, volume and balance, the modelled epoch, the stages and the peers."""
    hf, imb, cm, pp = r["halo_fraction"], r["imbalance"], r["cost_model"], r["peers_per_part"]
    obj = f", objective {r['objective']}" if r.get("objective") else ""
    how = f" -> {r['backend']} ({r['library']})" if r["backend"] != "random" else ""
    return [
        f"partition: {r['parts']} parts, method {r['method']}{how}{obj}, seed {r['seed']}",
        f"  threads          {r['threads']} ({'deterministic' if r['deterministic'] else 'not deterministic'}"
        f": {r['determinism']})",
        *([f"  kaminpar preset  {r['kaminpar']['preset']} ({r['kaminpar']['why']})"] if r.get("kaminpar") else []),
        f"  graph            {r['num_nodes']:,} nodes, {r['num_edges']:,} undirected edges",
        f"  edge cut         {r['edge_cut']:,} ({r['edge_cut'] / max(r['num_edges'], 1):.1%} of edges)",
        f"  comm volume      {r['comm_volume']:,} rows"
        f" (random: {r['random_comm_volume']:,}, ratio {r['vs_random']:.3f})",
        f"  max send / recv  {r['max_send_volume']:,} / {r['max_recv_volume']:,} rows per part",
        f"  max send / mean  {r['max_send_over_mean']:.3f} (recv {r['max_recv_over_mean']:.3f})",
        f"  halo fraction    max {max(hf):.3f}, mean {sum(hf) / len(hf):.3f} (halo rows / owned rows)",
        f"  imbalance        nodes {imb['nodes']:.3f}, edges {imb['edges']:.3f}, train {imb['train']:.3f} (max/mean)",
        f"  modelled epoch   {r['modelled_epoch_s'] * 1e3:.4g} ms (network {cm['network']}, "
        f"GCN widths {'-'.join(map(str, cm['widths']))})",
        "  stages           " + ", ".join(f"{st['stage']} {st['seconds']:.2f} s" for st in r["stages"])
        + f" (peak {max(st['peak_bytes'] for st in r['stages']) / 2**30:.2f} GiB)",
        f"  peers            max {max(pp)}, mean {sum(pp) / len(pp):.1f} (ranks each exchanges halo rows with)",
    ]


def _choice_lines(r: dict) -> list[str]:
    """The balance kept and how auto chose it, the backends not tried and the candidates over the budget."""
    lines = []
    auto = r.get("auto")
    if r["tolerances"]:
        bal = ",".join(f"{c}:{t:g}" for c, t in r["tolerances"].items())
        how = ""
        if auto:
            plain = auto["plain_metis_modelled_epoch_s"]
            how = (f" (auto: best of {len(auto['candidates'])} setting(s)"
                   f" of {len({c['method'] for c in auto['candidates']})} backend(s)"
                   + (f"; plain METIS {plain * 1e3:.4g} ms" if plain is not None else "") + ")")
        lines.append(f"  balance          {bal}{how}")
        if auto:
            lines.append(f"  chosen by        {auto['decided_by']['why']}")
    if r.get("skipped"):
        lines.append("  not tried        " + "; ".join(r["skipped"].values()))
    over = auto["budget"]["skipped"] if auto else None
    if over:
        b, m = auto["budget"], auto["budget"].get("memory")  # no memory budget in a report before it
        memory = (f" and its partitioner's estimated peak within {m['bytes'] / 2**30:.2f} GiB ({m['multiple']:g} x "
                  f"its leanest, {m['leanest']})" if m else "")
        lines.append(f"  over budget      {len(over)} candidate(s) not run: auto's estimated time kept within "
                     f"{b['seconds']:.1f} s ({b['multiple']:g} x its cheapest, {b['cheapest']}){memory}; "
                     f"--auto-budget 0 runs all: {', '.join(over)}")
    return lines


def _refine_lines(f: dict | None) -> list[str]:
    """The refinement's volume passes and its peer pruning (none when the parts were not refined)."""
    if not f:
        return []
    stop = f" (stopped: {f['stop']})" if "stop" in f else ""  # a report before the stop was recorded has none
    lines = [f"  refinement       {f['moved']:,} nodes moved in {f['passes']} volume pass(es){stop}: max volume "
             f"{f['max_volume_before']:,} -> {f['max_volume_after']:,}, total {f['comm_volume_before']:,} -> "
             f"{f['comm_volume_after']:,}"]
    pr = f.get("peers", {})
    if pr.get("groups"):
        lines.append(f"  peer pruning     {pr['moved']:,} nodes in {pr['groups']} group(s): max peers "
                     f"{pr['max_peers_before']} -> {pr['max_peers_after']}")
    return lines
