"""User-facing errors: one clear line, exit code 2, no traceback."""


class UserError(Exception):
    """Bad input from the user (name, path, file, flag). The CLI prints it as one line and exits 2."""


class PeerFailed(UserError):
    """This rank stopped because another rank failed or vanished; the launcher reports the root cause first."""


class CollectiveDesync(UserError):
    """The ranks' collectives diverged (``--check-collectives``): two ranks entered different calls.

    A bug in the program, not in the input; it is still one line (naming both calls), raised
    on every rank at once instead of a hang until ``--timeout``.
    """
