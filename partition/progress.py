"""Progress of the partition pipeline: a bar on a terminal; piped, one line per stage that took a while.

Stages are named as they start (``stage.set_postfix_str("symmetrise")``, tqdm's spelling, so a bar
and this object are interchangeable). On a terminal a tqdm bar shows the stage running; otherwise
each stage that took at least :data:`MIN_SECONDS` prints one line to standard error when it ends,
``partition into 64: symmetrise 12.3 s`` (quick stages print nothing, so a small graph's output and a
one-line error stay as they were).
"""

from __future__ import annotations

import sys
import time

from tqdm import tqdm

MIN_SECONDS = 2.0


class Stages:
    """A tqdm bar on a terminal, else one line per slow stage (see the module docstring)."""

    def __init__(self, total: int | None, desc: str, enabled: bool = True, unit: str = "step", stream=None,
                 bar_format: str | None = None):
        self.stream = stream or sys.stderr
        self.desc = desc
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.enabled = enabled
        self.bar = tqdm(total=total, desc=desc, unit=unit, leave=False, file=self.stream,
                        bar_format=bar_format) if self.tty else None
        self.name: str | None = None
        self.t0 = time.perf_counter()

    def set_postfix_str(self, name: str) -> None:
        """Start stage ``name`` (ending the one before)."""
        self._end()
        self.name, self.t0 = name, time.perf_counter()
        if self.bar is not None:
            self.bar.set_postfix_str(name)

    def say(self, line: str) -> None:
        """Print ``line`` (when enabled) above the bar, which stays."""
        if self.bar is not None:
            self.bar.write(line, file=self.stream)
        elif self.enabled:
            print(line, file=self.stream, flush=True)

    def update(self, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        self._end()
        self.name = None
        if self.bar is not None:
            self.bar.close()

    def discard(self) -> None:
        """Close without a line for the running stage (it failed: its error is the one line to show)."""
        self.name = None
        self.close()

    def _end(self) -> None:
        if self.name is None or not self.enabled or self.tty:
            return
        took = time.perf_counter() - self.t0
        if took >= MIN_SECONDS:
            print(f"{self.desc}: {self.name} {took:.1f} s", file=self.stream, flush=True)


def stages_of(items, total: int, desc: str, enabled: bool = True):
    """Yield ``items``, shown as stage ``k/total`` each (a bar on a terminal, slow items one line each)."""
    st = Stages(total, desc, enabled, unit="part")
    try:
        for k, item in enumerate(items):
            st.set_postfix_str(f"{k + 1}/{total}")
            yield item
            st.update()
    finally:
        st.close()
