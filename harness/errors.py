"""The one exception the CLI turns into `error: <file>: <field>: <problem>` and exit code 2."""

from __future__ import annotations


class InputError(Exception):
    """Bad user input (config, CSV, option). Printed as one line, exit code 2, no traceback."""

    def __init__(self, source: str, field: str, problem: str):
        self.source, self.field, self.problem = str(source), field, problem
        parts = [p for p in (self.source, field, problem) if p]
        super().__init__(": ".join(parts))


class BackendUnavailable(RuntimeError):
    """The backend cannot run here (no device, missing package); the message says why and what to do."""
