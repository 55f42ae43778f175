"""User-facing errors: one clear line, exit code 2, no traceback."""


class UserError(Exception):
    """Bad input from the user (name, path, file, flag). The CLI prints it as one line and exits 2."""


class PeerFailed(UserError):
    """This rank stopped because another rank failed or vanished; the launcher reports the root cause first."""
