"""What keeps a job from hanging or failing in silence: the collectives compared across ranks
(``--check-collectives``), the watchdog that ends a rank whose wait outlives ``--timeout`` (both used by
:class:`~gnndist.dist.grid.ProcessGrid`), and the roll call that names the ranks no longer heard after a
collective failed (:func:`roll_call`, asked by :func:`gnndist.launcher.run_here`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from gnndist.errors import CollectiveDesync, PeerFailed, first_line

if TYPE_CHECKING:
    from gnndist.dist.grid import Place, ProcessGrid


class CollectiveCheck:
    """Compares every collective across ranks before it runs: a desync is a named error, not a hang.

    SPMD code enters the same collectives in the same order on every rank (each on its own
    members of an axis). Before each one, the ranks all-gather, over a gloo group of their
    own, ``(call number, hash of op and axis)``; if any rank differs, every rank gathers the
    calls' descriptions (op, axis, the gnndist function and line that called it) and raises
    :class:`~gnndist.errors.CollectiveDesync` naming the first two ranks that diverge. A rank
    that leaves the run (done, or failed) announces it, so a rank left waiting fails at once.
    Turned on by ``--check-collectives`` or ``GNNDIST_CHECK_COLLECTIVES=1``; it costs one
    small all-gather per collective.
    """

    END = "left the run (finished or failed)"

    def __init__(self, world_size: int, timeout: float):
        self.world_size, self.timeout = world_size, timeout
        # a CPU group of its own: never queued behind the real ones
        self.group = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout))
        self.calls = 0

    def check(self, op: str, axis: str) -> None:
        self.calls += 1
        what = f"{op} on {axis}"
        mine = torch.tensor([self.calls, zlib.crc32(what.encode())], dtype=torch.int64)
        every = [torch.empty_like(mine) for _ in range(self.world_size)]
        try:
            dist.all_gather(every, mine, group=self.group)
        except (RuntimeError, dist.DistError) as e:
            if op == self.END:
                raise
            text = first_line(e)
            raise PeerFailed(f"rank {dist.get_rank()}: {what} from {_caller()} failed: a peer rank died or did not "
                             f"answer within --timeout {self.timeout:g}s (--check-collectives: {text})") from None
        if all(bool((t == every[0]).all()) for t in every):
            return
        said = [None] * self.world_size
        where = self.END if op == self.END else f"{what} from {_caller()}"
        dist.all_gather_object(said, (self.calls, where), group=self.group)
        gone = [k for k, (_, w) in enumerate(said) if w == self.END]
        if gone and op != self.END:  # a rank left (done, or failed: its own error is the root cause)
            raise PeerFailed(f"rank {dist.get_rank()}: rank {gone[0]} left the run while this rank entered "
                             f"call #{self.calls} {where} (--check-collectives)")
        a = next(k for k in range(self.world_size) if not bool((every[k] == every[0]).all()))
        raise CollectiveDesync(
            f"collectives diverged (--check-collectives): rank 0 entered call #{said[0][0]} "
            f"{said[0][1]}, but rank {a} entered call #{said[a][0]} {said[a][1]}"
        )

    def close(self) -> None:
        """Tell every rank still in a collective that this one has left; ignore what they say back."""
        try:
            self.check(self.END, "world")
        except CollectiveDesync:
            pass
        except (RuntimeError, dist.DistError):  # the others are gone already
            pass


# the collectives' own frames, and the joining's (its first collectives)
_GRID_FILES = (__file__, *(os.path.join(os.path.dirname(__file__), f) for f in ("grid.py", "join.py")))


def _package_dirs() -> tuple[str, ...]:
    """The folders of gnndist and its subpackages, wherever they are installed (a wheel nests them in
    ``gnndist/``; the checkout keeps ``partition/``, ``kernels/`` and ``datasets/`` beside it)."""
    import importlib.util

    names = ("gnndist", "gnndist.partition", "gnndist.kernels", "gnndist.datasets")
    dirs = {os.path.dirname(os.path.abspath(importlib.util.find_spec(n).origin)) for n in names}
    return tuple(sorted(dirs, key=len, reverse=True))  # the innermost folder first


def _caller(depth: int = 3, frame=None) -> str:
    """The innermost ``depth`` functions that led to a collective: gnndist's own (outside the grid and this module)
    and the caller's code (a script, a custom model, a test); not the standard library's or other installed
    packages'."""
    import sysconfig

    ours = _package_dirs()
    libraries = tuple({sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib")})
    out, frame = [], frame if frame is not None else sys._getframe(1)
    while frame is not None and len(out) < depth:
        code = frame.f_code
        name = code.co_filename
        root = next((r for r in ours if name.startswith(r + os.sep)), None)
        ours_or_user = root is not None or not name.startswith(libraries)
        if name not in _GRID_FILES and not name.startswith("<") and ours_or_user:
            rel = os.path.relpath(name, os.path.dirname(root)) if root else os.path.relpath(name)
            out.append(f"{rel}:{frame.f_lineno} {getattr(code, 'co_qualname', code.co_name)}")
        frame = frame.f_back
    return " < ".join(out) or "?"


class Watchdog:
    """Ends this rank when one of the grid's waits lasts past ``timeout`` + :attr:`GRACE` seconds.

    torch bounds most waits by the group's timeout and then raises (the rank's one line names the collective);
    this is the backstop for a wait that does not (a store, a group's creation, a collective whose peer is
    alive but elsewhere). A daemon thread looks every second; when a wait is overdue it prints one line naming
    the wait and where it was entered (the main thread's innermost gnndist frames), calls ``on_stuck`` with it
    (the launcher records it as the rank's error) and exits the process with code 2. The launcher then stops
    the other ranks of its host, and every peer waiting on this rank fails at once (its connection is gone).
    """

    GRACE = 15.0

    def __init__(self, rank: int, timeout: float, on_stuck: Callable[[str], None] | None = None,
                 exit: Callable[[int], None] = os._exit, poll: float = 1.0):
        self.rank, self.timeout, self.on_stuck, self._exit, self._poll = rank, timeout, on_stuck, exit, poll
        self.what: str | None = None
        self.since = 0.0
        self._main = threading.get_ident()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="gnndist-watchdog", daemon=True)
        self._thread.start()

    @contextlib.contextmanager
    def waiting(self, what: str) -> Iterator[None]:
        if self.what is not None or threading.get_ident() != self._main:  # nested, or not the rank's own thread
            yield
            return
        self.what, self.since = what, time.monotonic()
        try:
            yield
        finally:
            self.what = None

    def overdue(self, now: float | None = None) -> str | None:
        """The line to leave with, when the current wait is overdue; else ``None``."""
        what, since = self.what, self.since
        if what is None:
            return None
        waited = (now if now is not None else time.monotonic()) - since
        if waited <= self.timeout + self.GRACE:
            return None
        frame = sys._current_frames().get(self._main)
        where = _caller(frame=frame) if frame is not None else "?"
        return (f"rank {self.rank}: stuck {waited:.0f}s in {what} (from {where}), past --timeout {self.timeout:g}s: "
                f"leaving the job")

    def _watch(self) -> None:
        while not self._stop.wait(self._poll):
            line = self.overdue()
            if line is None:
                continue
            print(f"gnndist: error: {line}", file=sys.stderr, flush=True)
            if self.on_stuck is not None:
                try:
                    self.on_stuck(line)
                except Exception:
                    pass
            sys.stdout.flush()
            self._exit(2)
            return

    def stop(self) -> None:
        self._stop.set()


def ranks_text(ranks: list[int]) -> str:
    """``0, 2, 5``: at most eight ranks named, then how many more."""
    return ", ".join(map(str, ranks[:8])) + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")


def roll_call(grid: ProcessGrid, place: Place, wait: float = 5.0) -> str | None:
    """After a collective failed: which ranks can still be heard, through the job's store (a clause for the
    error line), or ``None`` when every rank answered or there is no store to ask.

    Every rank that gets here writes its host under a key of this attempt of the job (``place``'s run id and
    restart) and waits up to ``wait`` seconds for the others'. Ranks never heard are named with their hosts (their
    host or its link is down, or they are stuck outside a collective); a rank that cannot reach the store says so
    (its own link is down, or the store's host is). The store is torch's default group's (a private accessor):
    the one connection every rank still has when a collective's peers are gone.
    """
    if not grid.distributed:
        return None
    try:
        store = dist.distributed_c10d._get_default_store()
    except (RuntimeError, ValueError, AttributeError):
        return None
    key = f"gnndist/roll/{place.run_id}/{place.restart}"
    heard: dict[str, object] = {"missing": list(range(grid.world_size))}

    def ask() -> None:  # in a thread: a store behind a cut link blocks past its own timeout
        try:
            store.set_timeout(timedelta(seconds=wait))
            store.set(f"{key}/{grid.rank}", grid.hosts[grid.rank])
            deadline = time.monotonic() + wait
            missing = heard["missing"]
            while missing and time.monotonic() < deadline:
                missing = [r for r in missing if not store.check([f"{key}/{r}"])]
                heard["missing"] = missing
                if missing:
                    time.sleep(0.2)
            heard["done"] = True
        except (RuntimeError, dist.DistError) as e:
            heard["error"] = first_line(e)

    asking = threading.Thread(target=ask, daemon=True, name="gnndist-roll-call")
    asking.start()
    asking.join(wait + 2.0)
    if "done" not in heard:
        why = heard.get("error", f"no answer within {wait + 2.0:g}s")
        return (f"this rank ({grid.hosts[grid.rank]}) could not reach the job's store: its host's link is down, "
                f"or the store's host is ({why})")
    missing = heard["missing"]
    if not missing:
        return None
    hosts = sorted({grid.hosts[r] for r in missing})
    return (f"no word from rank{'s' * (len(missing) > 1)} {ranks_text(missing)} on {', '.join(hosts)} within "
            f"{wait:g}s: their host or its link is down, or they are stuck outside a collective")
