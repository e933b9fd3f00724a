"""One-line failures for every command-line entry point.

A user who passes a bad flag, a missing file or an output folder on a full disk should read one line
that names the culprit and the fix, not a traceback (`--debug` brings the traceback back). Project
errors already carry such a message; usual OS errors (ENOSPC, EACCES, ENOTDIR, ENOENT) get one from
their errno; Ray task errors are unwrapped to the exception the task raised.
"""

from __future__ import annotations

import argparse
import atexit
import errno
import logging
import os
import re
import signal
import sys
import threading
from typing import Callable, NoReturn, Sequence

DEBUG_FLAG = "--debug"
PROJECT_PACKAGES = ("common", "preprocess", "trainer", "pipelines", "bench")

_ERRNO_HINTS = {
    errno.ENOSPC: "no space left on device; free space or write somewhere else",
    errno.EDQUOT: "disk quota exceeded; free space or write somewhere else",
    errno.EACCES: "permission denied; choose a path you can write/read",
    errno.EPERM: "operation not permitted; choose a path you can write/read",
    errno.ENOTDIR: "a component of this path is a file, not a directory",
    errno.EISDIR: "is a directory, expected a file",
    errno.EEXIST: "exists as a file where a directory is needed; choose another path",
    errno.ENOENT: "no such file or directory",
    errno.EROFS: "read-only file system; write somewhere else",
}


_sigint_seen = False


def latch_sigint() -> None:
    """Remember every SIGINT, so a Ctrl-C that gets swallowed still stops the program.

    Python turns SIGINT into KeyboardInterrupt in whatever Python code runs next, and some places drop it.
    The one found: a Ctrl-C that lands while the trainer forks its DataLoader workers (a fork of
    a process holding torch takes long enough under load) is raised inside an at-fork callback (logging's
    _releaseLock), and CPython only prints "Exception ignored in ..." for an exception there; the run then
    trained to the end with exit status 0. Bare `except:` clauses in optional-import fallbacks are others.
    This handler raises the same KeyboardInterrupt and sets a flag that raise_if_interrupted() checks at
    points the program passes often; such ignored KeyboardInterrupts are not printed (the flag re-raises
    them). A SIGINT the parent set to be ignored (`cmd &` in a script) stays ignored."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return

    def on_sigint(signum, frame):
        global _sigint_seen
        _sigint_seen = True
        raise KeyboardInterrupt

    default_hook = sys.unraisablehook

    def unraisable(info) -> None:
        if not (_sigint_seen and isinstance(info.exc_value, KeyboardInterrupt)):
            default_hook(info)

    signal.signal(signal.SIGINT, on_sigint)
    sys.unraisablehook = unraisable


def raise_if_interrupted() -> None:
    """KeyboardInterrupt if a SIGINT arrived since latch_sigint() (its own KeyboardInterrupt was lost)."""
    if _sigint_seen:
        raise KeyboardInterrupt


def summary(doc: str) -> str:
    """A module docstring's first paragraph as one line: what a command's --help says it does."""
    return " ".join(doc.strip().split("\n\n")[0].split())


class _HelpAll(argparse.Action):
    def __init__(self, option_strings, dest, **kw):
        super().__init__(
            option_strings,
            dest,
            nargs=0,
            default=argparse.SUPPRESS,
            help="every flag: the research and performance knobs too",
        )

    def __call__(self, parser, namespace, values, option_string=None):
        parser.print_help(show_all=True)
        parser.exit()


class _AdvancedFlags:
    """add_argument(..., advanced=True): a research or performance knob, listed by --help-all only."""

    def add_argument(self, *args, advanced: bool = False, **kwargs):
        action = super().add_argument(*args, **kwargs)
        action.advanced = advanced
        return action


class _Group(_AdvancedFlags, argparse._ArgumentGroup):
    pass


class Parser(_AdvancedFlags, argparse.ArgumentParser):
    """Every entry point's parser: a short --help (advanced flags under --help-all), --debug for the
    traceback, and usage errors as one line that names the flag (exit status 2, as argparse)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # a value such as --split -10,55,55 reaches its flag's own check (one line in the user's terms), not
        # argparse's "expected one argument": negative numbers and comma lists of numbers are values
        self._negative_number_matcher = re.compile(r"^-\d*\.?\d+([,\s]+-?\d*\.?\d+)*$")
        self.add_argument("--help-all", action=_HelpAll)
        self.add_argument(DEBUG_FLAG, action="store_true", help="show the full traceback of an error", advanced=True)

    def add_argument_group(self, *args, **kwargs):
        group = _Group(self, *args, **kwargs)
        self._action_groups.append(group)
        return group

    def format_help(self, show_all: bool = False) -> str:
        hidden = [a for a in self._actions if getattr(a, "advanced", False) and not show_all]
        saved = [a.help for a in hidden]
        for a in hidden:
            a.help = argparse.SUPPRESS
        try:
            return super().format_help()
        finally:
            for a, h in zip(hidden, saved):
                a.help = h

    def print_help(self, file=None, show_all: bool = False) -> None:
        self._print_message(self.format_help(show_all), file or sys.stdout)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def unwrap(err: BaseException) -> BaseException:
    """The exception that really happened: Ray task errors carry it as `.cause`."""
    seen = set()
    while id(err) not in seen:
        seen.add(id(err))
        cause = getattr(err, "cause", None)
        if type(err).__name__.startswith("RayTaskError") and isinstance(cause, BaseException):
            err = cause
            continue
        break
    return err


def describe(err: BaseException) -> str:
    """One line for `err`: the project's own message, an OS error's file and errno hint, or type: message."""
    err = unwrap(err)
    if isinstance(err, OSError) and err.errno in _ERRNO_HINTS:
        where = err.filename if err.filename is not None else ""
        if err.filename2 is not None:
            where = f"{where} -> {err.filename2}"
        text = _ERRNO_HINTS[err.errno]
        return f"{where}: {text}" if where else f"{text} ({_flat(err)})"
    if _is_project_error(err):
        return _flat(err)
    return f"{type(err).__name__}: {_flat(err)}"


def _is_project_error(err: BaseException) -> bool:
    module = type(err).__module__.split(".")[0]
    return module in PROJECT_PACKAGES or module == "__main__"  # `python -m pkg` defines errors in __main__


def _flat(err: BaseException) -> str:
    raw = str(err)
    if "Traceback (most recent call last)" in raw:
        # A worker's exception re-raised with its traceback as text (torch DataLoader workers, Ray):
        # the last line is "pkg.Error: message"; keep the message of a project error, else the line.
        last = [line for line in raw.strip().splitlines() if line.strip()][-1].strip()
        kind, sep, message = last.partition(": ")
        if sep and kind.split(".")[0] in PROJECT_PACKAGES:
            last = message
        raw = last
    return " ".join(raw.split())[:500] or type(err).__name__


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def command(build_parser: Callable, work: Callable, argv: Sequence[str] | None, prog: str, *, config: Callable) -> int:
    """Every command's body: parse the flags with build_parser(prog), log at INFO, then work(config(args)): the
    flags become the command's typed configuration once, here (`config`, its `from_args`), and nothing below
    reads them. A FlagError (a bad flag value) from either is a usage error (one line, exit 2); any other
    failure is run_cli's one line (exit 1)."""
    from common.flags import FlagError

    def body(raw):
        parser = build_parser(prog)
        args = parser.parse_args(raw)
        logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
        try:
            return work(config(args))
        except FlagError as err:
            parser.error(str(err))

    return run_cli(body, argv, prog=prog)


def run_cli(
    main: Callable[[Sequence[str] | None], int | None],
    argv: Sequence[str] | None = None,
    prog: str = "",
    strip_debug: bool = False,
) -> int:
    """Call `main(argv)`; any exception becomes one line on stderr and exit status 1 (130 on Ctrl-C).

    With --debug among the arguments the exception propagates unchanged (full traceback).
    `strip_debug` removes --debug before calling a main whose parser does not know the flag."""
    args = list(sys.argv[1:] if argv is None else argv)
    if strip_debug:
        argv = [a for a in args if a != DEBUG_FLAG]
    for noisy in ("botocore", "aiobotocore", "s3fs"):  # remote storage clients log every endpoint lookup at INFO
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        return int(main(argv) or 0)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BaseException as err:  # noqa: BLE001 - the point is that nothing escapes as a traceback
        if DEBUG_FLAG in args:
            raise
        logging.shutdown()  # flush log lines before the final one
        prefix = f"{prog}: error: " if prog else "error: "
        print(prefix + describe(err), file=sys.stderr)
        return 1


def exit_process(main: Callable[[], int | None]) -> NoReturn:
    """A command's process: run main(), then end the process with its status without the interpreter's
    finalization. Python's own exit steps run first, in its order: non-daemon threads joined, atexit handlers
    (Ray's shutdown, loader workers, temporary folders, logging), stdio flushed; then os._exit.
    Why: native thread pools (Arrow's, torch's) torn down by C++ static destructors while a pool thread
    still runs abort the process after its last line ('terminate called without an active exception',
    status -6), seen under load on an error exit. An exception main() lets through (--debug) propagates."""
    try:
        code = main()
    except SystemExit as stop:
        code = stop.code
    if code is not None and not isinstance(code, int):  # sys.exit("message"), as the interpreter does it
        print(code, file=sys.stderr)
        code = 1
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be said on it
            pass
    os._exit(code or 0)
