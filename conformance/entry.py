"""The console script's entry point: the CLI, imported only here, so that a broken install (a module
missing, a dependency that does not import) still ends with exit 2 and one line, never with
Python's exit 1, which CI reads as "KubeRay is not conformant"."""

from __future__ import annotations

import sys
import tempfile
import traceback

EXIT_ENVIRONMENT = 2  # conformance.errors.EXIT_ENVIRONMENT, not imported: that import may be what fails


def main() -> None:
    try:
        from conformance.cli import run  # noqa: PLC0415 - the import is what this guards
    except Exception as exc:  # noqa: BLE001 - any import failure is the installation's, not KubeRay's
        with tempfile.NamedTemporaryFile("w", prefix="krc-", suffix=".traceback", delete=False) as out:
            out.write(traceback.format_exc())
        cause = f"{type(exc).__name__}: {exc}; traceback in {out.name}"
        print(f"kuberay-conformance cannot start ({cause}): reinstall it", file=sys.stderr)
        sys.exit(EXIT_ENVIRONMENT)
    run()
