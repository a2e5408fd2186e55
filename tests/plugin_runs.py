"""A run of a small suite through pytest and the conformance plugin, as the tests start one,
and what such a run leaves on the cluster."""

from __future__ import annotations

import sys
from pathlib import Path

from kubernetes import client, config

from conformance.checks import RUN_LABEL


def plugin_command(suite: Path, run_dir: Path, *options: str, result_files: bool = False) -> list[str]:
    """pytest on SUITE with the plugin writing RUN_DIR; `result_files` adds junit.xml and Allure results."""
    command = [sys.executable, "-m", "pytest", str(suite), "-p", "no:cacheprovider", "-q", *options]
    command += ["--conformance-run-dir", str(run_dir)]
    if result_files:
        command += ["--junitxml", str(run_dir / "junit.xml"), "--alluredir", str(run_dir / "allure-results")]
    return command


def run_namespaces(kubeconfig: Path, run_id: str) -> list[str]:
    """The run's namespaces that are not already on their way out."""
    core = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
    return [
        ns.metadata.name
        for ns in core.list_namespace(label_selector=f"{RUN_LABEL}={run_id}").items
        if ns.status.phase != "Terminating"
    ]
