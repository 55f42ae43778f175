"""User-facing errors: one clear line, exit code 2, no traceback; and the one line of any exception."""


def first_line(e: BaseException, empty: str | None = None) -> str:
    """The first line of ``e``'s message: what a one-line report quotes of a foreign error (torch's, gloo's).

    ``empty``: what to say of an exception without a message (default: its type's name).
    """
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__ if empty is None else empty


class UserError(Exception):
    """Bad input from the user (name, path, file, flag). The CLI prints it as one line and exits 2."""


class PeerFailed(UserError):
    """This rank stopped because another rank failed or vanished; the launcher reports the root cause first."""


class CollectiveDesync(UserError):
    """The ranks' collectives diverged (``--check-collectives``): two ranks entered different calls.

    A bug in the program, not in the input; it is still one line (naming both calls), raised
    on every rank at once instead of a hang until ``--timeout``.
    """


class RanksFailed(UserError):
    """A spawned rank failed; ``str()`` is the root cause's line, ``code`` the exit code (2: a user error, 1: a bug)."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


class RanksStopped(Exception):
    """The ranks were stopped by a signal to the launcher (``signum``: SIGINT, SIGTERM, ...)."""

    def __init__(self, signum: int, ranks: int):
        import signal

        name = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
        super().__init__(f"{name}; all {ranks} ranks stopped")
        self.signum = signum
