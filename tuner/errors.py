"""Errors a user can cause. The CLI turns each into one line on stderr and exit code 2."""


class UserError(Exception):
    """A mistake in the user's input (file, flag, URL): reported in one line, no traceback."""
