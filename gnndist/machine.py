"""What this process may use of its machine: its cores and its peak resident memory (bottom layer, stdlib only).

Read by the partitioner (threads, the report's stage peaks), the process grid (threads per rank) and the
timers (a CPU rank's peak memory).
"""

from __future__ import annotations

import os


def cores() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def rss_peak() -> int:
    """This process's resident-set high-water mark in bytes (Linux VmHWM; else getrusage's ru_maxrss)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
