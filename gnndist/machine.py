"""This process on its machine: the cores it may use, its peak resident memory, how peers reach its host (its
interfaces' addresses, what a name resolves to, the route to an address), a free port, how much one pass over a
large array takes at once, where gnndist keeps its files (bottom layer, standard library only).

Read by the partitioner (threads, the report's stage peaks, the chunk size), the dataset generators and
converters (the chunk size), the joining of a job's group (threads per rank, the hosts of a job, the interface
gloo binds: :mod:`gnndist.dist.join`), the timers (a CPU rank's peak memory), the launcher (a local rendezvous
port), and the datasets, the partition cache and the probe's cache (the data root).
"""

from __future__ import annotations

import ctypes
import os
import socket

# Entries (edges, adjacency entries, table cells, feature values) one pass over a large array handles at once:
# it bounds every temporary array of the partitioner and the dataset generators to ~2^22 elements (32 MiB of
# int64), whatever the graph's size.
CHUNK = 1 << 22


def data_root() -> str:
    """Where gnndist keeps its files on this machine (datasets, cached partitions, the probe's constants):
    ``$GNNDIST_DATA`` (the user's override, read where it is used), else ``~/.cache/gnndist``."""
    return os.environ.get("GNNDIST_DATA") or os.path.join(os.path.expanduser("~"), ".cache", "gnndist")


def cores() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _status_bytes(field: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (``VmHWM``, ``VmRSS``) in bytes; None where it cannot be read."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def rss_peak() -> int:
    """This process's resident-set high-water mark in bytes (Linux VmHWM; else getrusage's ru_maxrss)."""
    peak = _status_bytes("VmHWM")
    if peak is not None:
        return peak
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def rss_now() -> int:
    """This process's resident set now in bytes (Linux VmRSS; 0 where it cannot be read)."""
    return _status_bytes("VmRSS") or 0


def reset_rss_peak() -> bool:
    """Reset this process's VmHWM to its resident set now (Linux ``clear_refs`` 5), so :func:`rss_peak` then
    measures one step's peak; False where the kernel does not allow it (the peak then stays the process's)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def free_port() -> int:
    """A TCP port free on this machine now (for a local group's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def interface_addresses() -> dict[str, str]:
    """``{interface name: IPv4 address}`` of this process's network namespace (interfaces without one left out;
    empty where they cannot be read)."""
    import fcntl
    import struct

    found = {}
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for _, name in socket.if_nameindex():
                try:
                    req = struct.pack("256s", name.encode()[:15])
                    found[name] = socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, req)[20:24])  # SIOCGIFADDR
                except OSError:  # an interface without an IPv4 address
                    continue
    except OSError:
        pass
    return found


def host_identity() -> str:
    """This host as its peers reach it: ``hostname/addr,addr`` with the IPv4 addresses of its network interfaces
    (loopback aside), read in this process's network namespace; the hostname alone where they cannot be read."""
    addrs = sorted(a for a in interface_addresses().values() if not a.startswith("127."))
    return socket.gethostname() + ("/" + ",".join(addrs) if addrs else "")


def resolve_ipv4(name: str) -> list[str]:
    """The IPv4 addresses ``name`` resolves to here (none where it does not resolve)."""
    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(name, None, socket.AF_INET)})
    except (OSError, UnicodeError):
        return []


def route_source(addr: str) -> str | None:
    """The address of this host's packets to ``addr`` (the kernel's route; nothing is sent), or ``None``."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((addr, 9))
            return s.getsockname()[0]
    except OSError:
        return None


def pin_mmap_threshold(threshold: int = 1 << 20) -> bool:
    """Fix glibc's mmap threshold so tensors above ``threshold`` bytes are mmapped and returned on free.

    glibc raises the threshold (up to 32 MiB) after large frees; tensors below it are then
    carved from a fragmenting heap. A rank holding a 1/P slice has many tensors in that
    range, so its peak RSS would not shrink with P. No-op off glibc or when
    ``MALLOC_MMAP_THRESHOLD_`` is set by the user.
    """
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(libc.mallopt(-3, threshold))  # M_MMAP_THRESHOLD
