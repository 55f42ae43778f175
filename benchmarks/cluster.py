"""Run a gnndist command on H emulated hosts (network namespaces, shaped links), repeatedly; count hangs.

    sudo python benchmarks/cluster.py --hosts 16 --rate 100mbit --repeat 10 --fresh-root -- \
        train parts/cornell5-p16 --strategy auto --hidden 128 --epochs 1 --no-progress

Each run starts one torchrun agent per host (:class:`emulated_cluster.EmulatedCluster`) and waits at
most ``--limit`` seconds; a run still going then is a hang: every rank's Python stack is printed (py-spy, where
installed) and the run killed. ``--fresh-root``: each run gets an empty ``$GNNDIST_DATA`` (no probe cached, as
on a new shared home directory) in which the partition's dataset folder, if named by ``--link``, is linked.
Prints a line per run (exit codes, seconds, the 1-minute load) and, at the end, the hangs and any namespace
left behind (there should be none).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from emulated_cluster import EmulatedCluster, bits_per_second, dilation, leftovers, rate_for

from gnndist.errors import UserError


def dump_stacks(cluster: EmulatedCluster) -> None:
    spy = shutil.which("py-spy")
    if spy is None:
        print("  (py-spy not installed: no stacks)")
        return
    for host, pids in cluster.rank_pids().items():
        for pid in pids:
            r = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True)
            frames = [ln.strip() for ln in r.stdout.splitlines() if "(gnndist/" in ln or "elastic" in ln][:4]
            if frames:
                print(f"  host {host} pid {pid}: " + " < ".join(frames))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--ranks-per-host", type=int, default=1)
    p.add_argument("--rate", default=None, help="each link's rate in tc's units; 'none': unshaped (default 100mbit)")
    p.add_argument("--stands-for", default=None, metavar="RATE[xSPEEDUP]",
                   help="shape the links for a real cluster instead: its link rate, and how many times faster its "
                        "ranks compute than a core here (default 1; e.g. 25gbitx40 for GPUs 40x a core on 25 GbE)")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--limit", type=float, default=900.0, help="seconds after which a run counts as hung")
    p.add_argument("--fresh-root", action="store_true", help="an empty $GNNDIST_DATA for every run")
    p.add_argument("--link", default=None, help="with --fresh-root: a dataset folder to link into each root")
    p.add_argument("--cut", default=None, help="HOST:SECONDS[:FOR]: cut that host's link that long after each "
                   "start (a pulled cable; every rank should exit within --timeout, naming the collective), and "
                   "bring it back FOR seconds later")
    p.add_argument("--tag", default=None, help="name the namespaces gdc<TAG>-* (digits: the same addresses run "
                   "after run, so a probe stored by one run is found by the next; default: this process's id)")
    p.add_argument("--max-restarts", type=int, default=0, help="each torchrun agent's --max-restarts: with gnndist's "
                   "--checkpoint, the job resumes once the link is back")
    p.add_argument("--script", default=None, help="run this Python script on every rank instead of gnndist "
                   "(e.g. benchmarks/exchange_timeline.py); the arguments after -- are its own")
    p.add_argument("args", nargs=argparse.REMAINDER, help="-- then the gnndist command line")
    a = p.parse_args()
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    dil = dilation(a.hosts, a.ranks_per_host)
    if a.stands_for and a.rate:
        p.error("--rate or --stands-for, not both")
    if a.stands_for:
        link, _, speedup = a.stands_for.partition("x")
        try:
            rate = rate_for(link, a.hosts, a.ranks_per_host, float(speedup or 1))
        except ValueError:
            p.error(f"--stands-for {a.stands_for}: RATE or RATExSPEEDUP, e.g. 25gbitx40")
        except UserError as e:
            p.error(str(e))
        stands = f"stands for {link} links, ranks {float(speedup or 1):g}x a core here"
    else:
        rate = None if a.rate == "none" else (a.rate or "100mbit")
        stands = (f"stands for {bits_per_second(rate) * dil / 1e6:,.0f} Mbit/s links of one core per rank"
                  if rate else "unshaped")
    if a.script:
        args = ["--script", os.path.abspath(a.script), *args]
    print(f"{a.hosts} hosts x {a.ranks_per_host} ranks, links {rate or 'unshaped'}; compute dilated "
          f"{dil:.1f}x on {os.cpu_count()} cores ({stands}): gnndist {' '.join(args)}")
    hangs = failures = 0
    tags = []
    for i in range(a.repeat):
        env = {}
        if a.fresh_root:
            root = tempfile.mkdtemp(prefix="gdc-root-")
            if a.link:
                os.symlink(os.path.abspath(a.link), Path(root) / Path(a.link).name)
            env["GNNDIST_DATA"] = root
        t0 = time.time()
        at = []
        if a.cut:
            host, seconds, *back = (float(v) for v in a.cut.split(":"))
            at.append((seconds, lambda c, h=int(host): c.link(h, False)))
            if back:
                at.append((seconds + back[0], lambda c, h=int(host): c.link(h, True)))
        with EmulatedCluster(a.hosts, a.ranks_per_host, rate, tag=a.tag, max_restarts=a.max_restarts) as c:
            tags.append(c.tag)
            results = c.run(args, env=env, timeout=a.limit, on_timeout=dump_stacks, at=at)
        codes = [r.returncode for r in results]
        hung = any(rc is None for rc in codes)
        hangs += hung
        failures += not hung and any(codes)
        print(f"run {i}: {'HUNG' if hung else 'ok' if not any(codes) else 'failed'} in {time.time() - t0:.0f} s, "
              f"exit codes {codes}, agents exited at {min(r.seconds for r in results):.0f}-"
              f"{max(r.seconds for r in results):.0f} s, load {os.getloadavg()[0]:.1f}", flush=True)
        for r in results:
            lines = [ln for ln in r.stderr.splitlines() if ln.startswith("gnndist: ")]
            if r.host == 0 or r.returncode != 0:
                for ln in lines[-6:]:
                    print(f"  host {r.host}: {ln[:400]}")
            if r.host == 0:
                for ln in r.stdout.strip().splitlines()[-(1000 if a.script else 1):]:
                    print(f"  host 0: {ln if a.script else ln[:400]}")
        if a.fresh_root:
            shutil.rmtree(env["GNNDIST_DATA"], ignore_errors=True)
    left = [n for tag in set(tags) for n in leftovers(tag)]
    print(f"{hangs} hang(s), {failures} failed run(s) in {a.repeat}; namespaces left: {left or 'none'}")
    return 1 if hangs or failures or left else 0


if __name__ == "__main__":
    raise SystemExit(main())
