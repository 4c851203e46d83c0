"""The ``attnlab`` command line: a thin typer app.

Each module of this package registers the commands of one part of the library
(``register(app)``); a command parses its options and calls one library
function.  Errors the user can fix (``UserError``, ``ValueError``, missing
files) become one line on stderr and exit code 2, never a traceback; set
``ATTNLAB_DEBUG=1`` to see the traceback.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys

import typer

from attnlab.errors import UserError

app = typer.Typer(
    name="attnlab",
    help="The mathematics and the structure of transformer attention.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    _module = importlib.import_module(f"{__name__}.{_info.name}")
    if hasattr(_module, "register"):  # options.py holds the table of option constraints, no command
        _module.register(app)


SILENT_RANK_WAIT = 5.0   # seconds a rank > 0 waits before exiting on an option error (torchrun stops it sooner)


def fail(message: str) -> "typer.Exit":
    """Print ``attnlab: error: message`` (one line) and return the exit to raise; under ``torchrun`` rank 0 alone
    prints it (``llm.eval.ranks.says_errors``), every rank exits 2."""
    from attnlab.llm.eval.ranks import says_errors

    if says_errors():
        typer.echo(f"attnlab: error: {' '.join(str(message).split())}", err=True)
    else:   # a silent rank leaves rank 0 time to say the line: torchrun ends every rank once the first one exits
        import time

        time.sleep(SILENT_RANK_WAIT)
    return typer.Exit(code=2)


def as_flags(message: str, argv: list[str]) -> str:
    """The library names parameters (``w: must be >= 0``); the command line names its options (``--w: …``).

    A message that starts with ``name:`` where ``--name`` (``_`` → ``-``) is an option of the
    command being run is given that option's spelling; any other message is left as it is.
    """
    name, sep, rest = message.partition(":")
    if not sep or not name.isidentifier() or not argv:
        return message
    import typer.main

    group = typer.main.get_command(app)
    command = getattr(group, "commands", {}).get(argv[0])
    flag = "--" + name.replace("_", "-")
    options = {opt for p in getattr(command, "params", []) for opt in getattr(p, "opts", [])}
    return f"{flag}:{rest}" if flag in options else message


def _click_errors():
    """The exceptions module of the click that typer runs (typer 0.29 carries its own: ``typer._click``)."""
    return sys.modules[typer.BadParameter.__module__]


def usage_line(err) -> str:
    """One line for a usage error of click (a value of the wrong type, an unknown or missing option),
    naming the option: ``--n: 'abc' is not a valid integer`` instead of click's framed usage block."""
    errors = _click_errors()
    param = getattr(err, "param", None)
    if isinstance(err, errors.BadParameter) and not isinstance(err, errors.MissingParameter) and param is not None:
        option = getattr(param, "param_type_name", "") == "option" and param.opts
        message = f"{param.opts[0] if option else param.human_readable_name}: {err.message}"
    else:
        message = err.format_message()
    ctx = err.ctx
    path = ctx.command_path[len(ctx.find_root().command_path):].strip() if ctx else ""
    return f"{message} (see attnlab {path + ' ' if path else ''}--help)"


def main() -> None:
    """Entry point of the console script."""
    from attnlab.allocator import keep_freed_memory

    keep_freed_memory()  # large tensors reused, not page-faulted afresh (attnlab/allocator.py)
    try:
        code = app(standalone_mode=False)  # click's usage errors come here, to be said in one line
        sys.exit(code if isinstance(code, int) else 0)
    except _click_errors().UsageError as err:
        if os.environ.get("ATTNLAB_DEBUG"):
            raise
        if not err.format_message():  # no arguments: click printed the help
            sys.exit(err.exit_code)
        raise SystemExit(fail(usage_line(err)).exit_code) from None
    except typer.Abort:
        typer.echo("attnlab: aborted", err=True)
        sys.exit(1)
    except (UserError, ValueError, OSError, UnicodeDecodeError) as err:  # OSError: missing, existing, unwritable paths
        if os.environ.get("ATTNLAB_DEBUG"):
            raise
        raise SystemExit(fail(as_flags(str(err), sys.argv[1:])).exit_code) from None
    except (MemoryError, RuntimeError) as err:  # an allocation past the estimates of attnlab.train.resources
        out_of_memory = (isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError"
                         or "allocate" in str(err))
        if os.environ.get("ATTNLAB_DEBUG") or not out_of_memory:
            raise
        raise SystemExit(fail(f"out of memory ({str(err).splitlines()[0] if str(err) else type(err).__name__}); "
                              f"lower the sizes given").exit_code) from None
    except KeyboardInterrupt:
        typer.echo("attnlab: interrupted", err=True)
        sys.exit(130)
