"""Errors a user can cause. The CLI turns each into one line on stderr and exit code 2."""


class UserError(Exception):
    """A mistake in the user's input (file, flag, URL): reported in one line, no traceback."""


class RunInterrupted(Exception):
    """A run stopped by Ctrl-C, SIGTERM or SIGHUP, after its trial was recorded as
    interrupted. The CLI prints one line and exits with 128 + `signum`."""

    def __init__(self, signum: int, signal_name: str) -> None:
        super().__init__(f"interrupted by {signal_name}")
        self.signum, self.signal_name = signum, signal_name
