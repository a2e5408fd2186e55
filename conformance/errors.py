"""The harness's own errors, kept apart from conformance failures.

Each carries the cause and the fix, and renders as one line. The exit code tells CI
what kind of problem it was: 1 is reserved for conformance failures of the system
under test, 2 for the environment or the harness, 3 for usage.
"""

from __future__ import annotations

EXIT_CONFORMANT = 0
EXIT_NOT_CONFORMANT = 1
EXIT_ENVIRONMENT = 2
EXIT_USAGE = 3


class HarnessError(Exception):
    """The environment or the harness failed: nothing was learned about the system under test."""

    exit_code = EXIT_ENVIRONMENT

    def __init__(self, cause: str, fix: str = "") -> None:
        self.cause = cause
        self.fix = fix
        super().__init__(self.one_line())

    def one_line(self) -> str:
        return f"{self.cause}: {self.fix}" if self.fix else self.cause


class UsageError(HarnessError):
    """Bad input from the user, found before anything was provisioned."""

    exit_code = EXIT_USAGE


class ProvisioningError(HarnessError):
    """Building, starting or reaching the cluster under test failed."""
