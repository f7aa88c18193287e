"""The `moecal` command line: argument parsing only; every command's work lives in harness/cli/<name>.py.

Commands are loaded lazily: `moecal --help` and `moecal <cmd> ...` import only what that command needs (pandas,
scipy, matplotlib and the backends take seconds to import), so the top-level help lists commands from the table
below instead of importing every module. A command module itself imports those only inside the command function,
so `moecal <cmd> --help` is rendered from the signature without them (tests/test_help.py checks).

Every failure ends in one line on stderr — `error: <file>: <field>:
<problem>` for bad input (InputError), `error: <file>: <reason>` for an OS error, `error: moecal <cmd>: <problem>`
for a usage error — with exit code 2 (a failed check keeps its own code), never a traceback or a boxed message.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import shutil
import signal
import sys
import threading
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup

from harness.errors import InputError

# name → (module defining `register(app)`, the one-line help `moecal --help` shows). tests/test_cli.py checks that
# each line is the command's own short help, so the two cannot drift apart.
COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("init", "Scan --models for MoE checkpoints and write a command-workload config for `moecal sweep`."),
    "sweep": (
        "sweep",
        "Run the sweep: per point, warm-up, then rounds in which every arm runs once in rotating order.",
    ),
    "plan": (
        "plan",
        "Print the run plan (points × arms × rounds), memory per point and a time estimate; runs nothing.",
    ),
    "presets": ("presets", "List the shipped sweep configs: name, backend, workload kind and what each is for."),
    "doctor": (
        "doctor",
        "Print each backend's availability with the reason, what `auto` would pick, and package versions.",
    ),
    "summarize": (
        "summarize",
        "Medians, the fused/fallback estimate with its t interval, and a verdict against the margin, per point.",
    ),
    "crossover": (
        "crossover",
        "Where fused stops beating the fallback (with a test-inversion interval), and the keep/raise/lower decision.",
    ),
    "recommend": ("crossover", "The decision only: crossover line, keep/raise/lower with its reason, the line."),
    "report": ("report", "Write one run's addendum and plot, or one per-backend defaults addendum over several runs."),
    "compare": (
        "compare",
        "Did the crossover move between two runs (pins, commits, machines), and which points changed beyond noise.",
    ),
    "history": (
        "compare",
        "Plot the crossover and its interval per run, in the order given (labelled by date and library pin).",
    ),
    "check": (
        "check",
        "Regression gate: exit 0 ok, 1 regression, contradicted decision or missing points, 2 unusable input.",
    ),
    "check-reports": (
        "check",
        "Re-derive every stored addendum's numbers from its raw data; exit 1 when any disagree.",
    ),
    "import-mlxcel": (
        "import_mlxcel",
        "Each run becomes a sample row (round = run index); NA runs become skip rows with the reason.",
    ),
    "export": (
        "export",
        "The decision's crossover with its interval and each point's ratio with its bounds, for CI dashboards.",
    ),
    "bisect": ("bisect", "The first commit whose decision differs, after checking that the change reproduces."),
    "verify": ("verify", "Check every kernel path of a backend against the float64 reference (exit 1 on any failure)."),
    "fleet": (
        "fleet",
        "Run one calibration over several hardware classes (Ray): one run directory per entry, one fleet report.",
    ),
    "bench-kernels": ("bench_kernels", "µs per layer step, fused vs fallback, over a Dff grid at two d_model values."),
    "synth": (
        "synth",
        "Write synthetic checkpoints of MODEL_DIR's family at other expert sizes (random weights, MLX format).",
    ),
}


def _click_class(name: str) -> type[Exception]:
    """click's exception class `name`, from whichever click typer uses (recent typers vendor their own copy)."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)


USAGE_ERROR = _click_class("UsageError")  # unknown option or command, bad or missing value
CLICK_EXCEPTION = _click_class("ClickException")


def load_command(name: str) -> Any:
    """Import the module of one command and build its click command (None for an unknown name)."""
    if name not in COMMANDS:
        return None
    module = importlib.import_module(f"harness.cli.{COMMANDS[name][0]}")
    holder = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)
    module.register(holder)
    built = typer.main.get_command(holder)
    command = built.commands.get(name) if hasattr(built, "commands") else built
    command.context_settings["max_content_width"] = shutil.get_terminal_size().columns  # wrap at the terminal
    command.context_settings["help_option_names"] = ["-h", "--help"]  # `moecal <cmd> -h` too; not `moecal -h`
    for param in command.params:
        if param.param_type_name == "argument":
            param.display_type_rich = lambda ctx: None  # the metavar says it; typer would add the Python type
        if param.metavar is None and not getattr(param, "is_flag", False):
            param.metavar = _metavar(param)
    return command


METAVARS = {int: "N", float: "X", Path: "PATH", str: "TEXT"}


def _metavar(param: Any) -> str | None:
    """A metavar in words (N, X, PATH, TEXT; an argument's own name) instead of the Python type typer would show
    (`<list[Path]>`); None for a flag, which takes no value."""
    if param.param_type_name == "argument":
        return param.name.upper()
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    while typing.get_args(annotation) and annotation not in METAVARS:  # list[Path], Path | None → Path
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    return METAVARS.get(annotation)


class LazyGroup(TyperGroup):
    """The top-level group: knows command names and their help without importing them."""

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: typer.Context, cmd_name: str) -> Any:
        return load_command(cmd_name)

    def format_commands(self, ctx: typer.Context, formatter: Any) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, short) for name, (_, short) in COMMANDS.items()])


app = typer.Typer(
    name="moecal",
    cls=LazyGroup,
    help="Calibrate the fused decode-MoE Dff cap: sweep, summarize, find the crossover, recommend, report, check.",
    no_args_is_help=True,
    add_completion=True,  # `moecal --install-completion` (bash, zsh, fish, PowerShell)
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help at the top level: rich would load every command to list them
    context_settings={"max_content_width": shutil.get_terminal_size().columns},  # wrap at the terminal's width
)


def _print_version(value: bool) -> None:
    """`moecal --version`: the package version, and the harness commit when moecal runs from a git checkout."""
    if not value:
        return
    from harness import __version__
    from harness.runs import provenance

    commit, dirty = provenance.git_state()
    print(f"moecal {__version__} (harness commit {commit}{', uncommitted changes' if dirty else ''})")
    raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and harness commit."
    ),
) -> None:
    """Calibrate the fused decode-MoE Dff cap: sweep, summarize, find the crossover, recommend, report, check."""


# Options whose value may be left out: `--resume` alone means "the newest unfinished run", `--resume DIR` that one.
OPTIONAL_VALUE = {"--resume": ""}


def _is_config_argument(word: str) -> bool:
    """A sweep's CONFIG argument rather than a run directory: a YAML file, or a preset name that is no directory."""
    if word.endswith((".yaml", ".yml")):
        return True
    if Path(word).is_dir():
        return False
    from harness.config import resources  # only when --resume is given: `moecal --help` stays light

    return word in {p.name for p in resources.presets()}


def _optional_values(argv: list[str]) -> list[str]:
    """Spell a value-less optional option as `--opt=<default>`, the form click parses. A following word is the
    option's value unless it is another option or the sweep's CONFIG argument (a YAML file or a preset name)."""
    out: list[str] = []
    for index, arg in enumerate(argv):
        following = argv[index + 1] if index + 1 < len(argv) else None
        if arg in OPTIONAL_VALUE and (following is None or following.startswith("-") or _is_config_argument(following)):
            out.append(f"{arg}={OPTIONAL_VALUE[arg]}")
        else:
            out.append(arg)
    return out


class JsonStdout:
    """With `--json`, stdout carries exactly one JSON object on every path: what the command prints there is held
    back until it ends, and a failure replaces it with `{"error": <the error line>, "exit_code": N}` (the error line
    still goes to stderr). Without it, stdout is left alone."""

    def __init__(self) -> None:
        self.real: typing.TextIO | None = None
        self.held = io.StringIO()

    @contextlib.contextmanager
    def around(self, argv: list[str]) -> Iterator[None]:
        options = argv[: argv.index("--")] if "--" in argv else argv
        if "--json" not in options:
            yield
            return
        self.real, self.held = sys.stdout, io.StringIO()
        sys.stdout = self.held
        try:
            yield
        finally:
            sys.stdout, real, self.real = self.real, self.real, None
            real.write(self.held.getvalue())  # the command's own object, or the error object _fail left here

    def fail(self, line: str, code: int) -> None:
        if self.real is not None:
            self.held = io.StringIO()
            self.held.write(json.dumps({"error": line, "exit_code": code}) + "\n")
            sys.stdout = self.held


JSON_STDOUT = JsonStdout()


def _fail(message: str, code: int = 2) -> None:
    line = " ".join(message.split())  # one line, whatever the message holds
    print(f"error: {line}", file=sys.stderr)
    JSON_STDOUT.fail(line, code)
    sys.exit(code)


class Terminated(BaseException):
    """Ctrl-C (SIGINT), SIGTERM or SIGHUP, raised where the program is: every `finally` and context manager on the
    way out runs (the benchmark's process tree is killed, the meta.json segment closed, the run directory's lock
    released), then `main` exits 128 + the signal number with one line. Ctrl-C is not left a KeyboardInterrupt:
    typer turns that into a silent exit 130, and the user would never see `error: interrupted` and how to resume."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


TERMINATING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def _signals_as_exceptions() -> Iterator[None]:
    """While a command runs, SIGINT, SIGTERM and SIGHUP raise Terminated (the first one; later ones are ignored
    while the cleanup runs). The previous handlers come back afterwards (tests call `main` in-process); off the main
    thread, where Python cannot set handlers, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def handler(signum: int, frame: object) -> None:
        if not received:
            received.append(signum)
            raise Terminated(signum)

    previous = {signum: signal.signal(signum, handler) for signum in TERMINATING}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


# Commands that only analyse stored numbers run numpy's BLAS on one thread: their matrix products are small (a few
# runs per point), and the BLAS worker threads spin on them. `summarize` of a 10^5-row mlxcel CSV took 12.6 s of CPU
# with OpenBLAS's default threads and 7.2 s with one (scripts/bench_mlxcel_read.py). Measuring commands keep the
# default: a benchmark they start inherits the environment, and the CPU backend's timings must not change.
ONE_BLAS_THREAD = frozenset(
    {"summarize", "crossover", "recommend", "report", "compare", "history", "check", "check-reports"}
)
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


def main(argv: list[str] | None = None) -> None:
    """Entry point (the `moecal` script, `python -m harness`; tests pass `argv`). Exits with the command's code."""
    if argv is not None:  # an in-process call (tests): what a sweep records as its command line
        sys.argv = ["moecal", *argv]
    if argv is None and len(sys.argv) > 1 and sys.argv[1] in ONE_BLAS_THREAD:  # in-process calls: numpy is loaded
        for variable in BLAS_THREAD_VARIABLES:  # read when numpy loads its BLAS, i.e. inside the command
            os.environ.setdefault(variable, "1")
    with JSON_STDOUT.around(sys.argv[1:]):
        _run()


def _run() -> None:
    try:
        with _signals_as_exceptions():
            code = app(args=_optional_values(sys.argv[1:]), prog_name="moecal", standalone_mode=False)
    except USAGE_ERROR as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # `moecal` alone: the help, as click would print it
            print(exc.format_message())
            sys.exit(2)
        where = exc.ctx.command_path if exc.ctx else "moecal"
        _fail(f"{where}: {exc.format_message()} (see `{where} --help`)")
    except CLICK_EXCEPTION as exc:
        _fail(exc.format_message(), exc.exit_code)
    except typer.Abort:
        _fail("aborted", 130)
    except InputError as exc:
        _fail(str(exc))
    except ModuleNotFoundError as exc:  # an optional backend library: name the extra that installs it
        from harness.config.install_hint import missing_module_hint

        hint = missing_module_hint(exc.name)
        if hint is None:
            raise
        _fail(f"{' '.join(sys.argv[:2])}: {hint}")
    except OSError as exc:  # read-only folder, disk full, vanished file: say which file, not where in the code
        _fail(f"{exc.filename or '(file)'}: {exc.strerror or exc}")
    except UnicodeDecodeError as exc:
        _fail(f"(input): not UTF-8 text ({exc.reason} at byte {exc.start})")
    except KeyboardInterrupt as exc:
        _fail("; ".join(["interrupted", *getattr(exc, "__notes__", [])]), 130)
    except Terminated as exc:
        reason = "interrupted" if exc.signum == signal.SIGINT else f"terminated by {signal.Signals(exc.signum).name}"
        _fail("; ".join([reason, *getattr(exc, "__notes__", [])]), 128 + exc.signum)
    sys.exit(code if isinstance(code, int) else 0)
