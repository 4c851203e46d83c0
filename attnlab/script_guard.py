"""A benchmark script run under the command line's rules: one line, exit 2, never a traceback (``main_guard``).

Every ``benchmarks/*.py`` ends with ``main_guard(main)``: a bad option or file is said as ``attnlab: error: …`` on
stderr with exit status 2, its numbers read by the one parser of option values (``attnlab.option_values``).
"""
from attnlab.errors import UserError


def main_guard(main, argv: list[str] | None = None) -> None:
    """Run a script's ``main()`` under the command line's rules, then exit: the shared entry of ``benchmarks/*.py``.

    A ``UserError``, ``ValueError``, ``OSError`` or ``UnicodeDecodeError`` (and a ``sys.exit("message")``, and an
    argparse usage error) becomes one line ``attnlab: error: <message>`` on stderr and exit status 2, never a
    traceback (``ATTNLAB_DEBUG=1`` shows it); an ``--out`` folder that the failed run created and left empty is
    removed, so nothing is left behind (``argv``: where ``--out`` is looked for, ``sys.argv[1:]`` by default).
    ``main`` returning an int exits with it.  An argument of type ``int`` or ``float`` is read as every option value
    is (``attnlab.option_values.number``: ASCII digits, no ``_`` or spaces, finite), its flag named when it is not.
    """
    import argparse
    import os
    import sys
    from pathlib import Path

    argv = sys.argv[1:] if argv is None else argv
    out = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--out"), None)
    out = next((a.split("=", 1)[1] for a in argv if a.startswith("--out=")), out)
    new_out = Path(out) if out is not None and not Path(out).exists() else None

    def fail(message: str) -> None:
        if os.environ.get("ATTNLAB_DEBUG") and sys.exc_info()[0] is not None:
            raise
        if new_out is not None and new_out.is_dir() and not any(new_out.iterdir()):
            new_out.rmdir()   # made by the failed run, still empty: not left behind
        message = " ".join(str(message).split())
        head, sep, rest = message.partition(": error: ")   # a script's own "name: error: ..." said once
        print(f"attnlab: error: {rest if sep and ' ' not in head else message}", file=sys.stderr)
        sys.exit(2)

    def usage_error(parser, message):   # argparse's usage block and error line, as one line naming the script
        fail(f"{message} (see {parser.prog} --help)")

    def canonical_value(parser, action, text):   # an int or float argument read by the one parser of numbers
        if action.type in (int, float) and isinstance(text, str):
            from attnlab.option_values import number

            return number(text, action.type, action.option_strings[0] if action.option_strings else action.dest)
        return get_value(parser, action, text)

    error, argparse.ArgumentParser.error = argparse.ArgumentParser.error, usage_error   # restored when main is done
    get_value, argparse.ArgumentParser._get_value = argparse.ArgumentParser._get_value, canonical_value
    try:
        code = main()
    except (UserError, ValueError, OSError, UnicodeDecodeError) as err:
        fail(str(err))
    except SystemExit as err:
        if isinstance(err.code, str):   # sys.exit("message"): an error said by the script
            fail(err.code)
        if err.code not in (None, 0) and new_out is not None and new_out.is_dir() and not any(new_out.iterdir()):
            new_out.rmdir()
        raise
    except KeyboardInterrupt:
        print("attnlab: interrupted", file=sys.stderr)
        sys.exit(130)
    finally:
        argparse.ArgumentParser.error = error
        argparse.ArgumentParser._get_value = get_value
    sys.exit(code if isinstance(code, int) else 0)
