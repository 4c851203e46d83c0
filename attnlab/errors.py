"""The one exception type the command line turns into a one-line message.

Library functions raise ``ValueError`` (naming the argument) for bad arrays and
``UserError`` for bad files, options and states (a corrupt checkpoint, an
existing run folder, an unreachable hub).  ``attnlab.cli.main`` prints either as
``attnlab: error: <message>`` on one line and exits with status 2; nothing is
written before the inputs are validated.
"""


class UserError(Exception):
    """A problem with the user's input, reported on one line (exit code 2)."""
