"""Provenance a report cannot read from its input, given on the command line (`report`, `import-mlxcel`).

Declared once so both commands spell them alike. Why they exist: an mlxcel CSV may not name its date, host or
library pin (or name them in words moecal cannot read), and an addendum must state the truth, never "unknown-host"
or the day it was written.
"""

from __future__ import annotations

import datetime as _dt
from typing import Annotated

import typer

from harness.errors import InputError

DateOpt = Annotated[
    str | None,
    typer.Option(
        metavar="YYYY-MM-DD", help="the day the runs were measured (default: from the input)", show_default=False
    ),
]
HostOpt = Annotated[
    str | None, typer.Option(help="the machine that measured (default: from the input)", show_default=False)
]
BackendOpt = Annotated[
    str | None,
    typer.Option(help="the backend the runs used, e.g. cuda or metal (default: from the input)", show_default=False),
]
GpuOpt = Annotated[str | None, typer.Option(help="the GPU that measured (default: from the input)", show_default=False)]
LibraryPinOpt = Annotated[
    str | None,
    typer.Option(help="the library under test, e.g. 'MLX pin e9463bb' (default: from the input)", show_default=False),
]


def provenance_overrides(
    date: str | None, host: str | None, backend: str | None, gpu: str | None, library_pin: str | None
) -> dict[str, str]:
    """The given overrides by provenance key; a date that is not a calendar yyyy-mm-dd is one error line."""
    if date is not None:
        try:
            _dt.date.fromisoformat(date)
        except ValueError:
            raise InputError("--date", date, "expected a date as YYYY-MM-DD") from None
        if len(date) != 10:
            raise InputError("--date", date, "expected a date as YYYY-MM-DD")
    given = {"date": date, "host": host, "backend": backend, "gpu": gpu, "library_pin": library_pin}
    return {key: value.strip() for key, value in given.items() if value is not None and value.strip()}
