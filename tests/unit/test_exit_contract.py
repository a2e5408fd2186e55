"""The exit-code contract at the outermost layers: the CLI's `guarded` and the pytest plugin.

0 conformant, 1 conformance failures, 2 environment/harness, 3 usage. A bug of the harness must
never be 1; a usage problem under plain pytest is a usage error, not an INTERNALERROR.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import cli
from conformance.errors import EXIT_ENVIRONMENT, EXIT_USAGE, ProvisioningError, UsageError

BAD_PROFILE = "name: x\ndescription: y\nray_versions: [2.10]\n"


def _guard(action, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as caught:
        cli.guarded(action)
    return int(caught.value.code or 0), capsys.readouterr().err


def test_an_unexpected_exception_is_exit_2_with_one_line_and_the_traceback_in_a_file(capsys) -> None:
    def broken() -> int:
        return {}["missing key"]

    code, err = _guard(broken, capsys)
    assert code == EXIT_ENVIRONMENT
    assert err.count("\n") == 1, err
    assert "internal error: KeyError: 'missing key'" in err
    written = re.search(r"traceback in (\S+)\)", err)
    assert written, err
    text = Path(written.group(1)).read_text()
    Path(written.group(1)).unlink()
    assert "Traceback (most recent call last)" in text and "in broken" in text


@pytest.mark.parametrize(
    ("error", "code"),
    [(UsageError("bad", "fix it"), EXIT_USAGE), (ProvisioningError("down"), EXIT_ENVIRONMENT)],
)
def test_harness_errors_keep_their_own_codes(capsys, error: Exception, code: int) -> None:
    def action() -> int:
        raise error

    got, err = _guard(action, capsys)
    assert got == code
    assert err.strip() == f"kuberay-conformance: error: {error}"


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    program = Path(sys.executable).with_name("kuberay-conformance")
    return subprocess.run([str(program), *args], capture_output=True, text=True, check=False, cwd=cwd)


def test_profile_check_exits_0_for_a_valid_profile_and_3_for_a_bad_one(tmp_path: Path) -> None:
    good = _cli("profile", "check", "default")
    assert good.returncode == 0, good.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD_PROFILE)
    result = _cli("profile", "check", str(bad))
    assert result.returncode == EXIT_USAGE
    assert 'ray_versions[0]: 2.10 is a number, not a string; quote it: "2.10"' in result.stderr
    assert "images: missing" in result.stderr  # every problem at once


def test_a_bad_profile_under_plain_pytest_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD_PROFILE)
    (tmp_path / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--conformance-provider", "local",
         "--conformance-profile", str(bad), str(tmp_path)],
        capture_output=True, text=True, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert "INTERNALERROR" not in result.stdout + result.stderr
    assert "ERROR: kuberay-conformance: profile" in result.stderr


def test_cluster_env_exports_the_context_for_helm_and_kubectl(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    result = _cli(
        "cluster", "env", "--provider", "existing", "--kubeconfig", str(kubeconfig), "--context", "b c"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"export KUBECONFIG={kubeconfig}",
        "export HELM_KUBECONTEXT='b c'",
        """alias kubectl='kubectl --context '"'"'b c'"'"''""",
    ]
    (tmp_path / "env.sh").write_text(result.stdout)
    bash = subprocess.run(
        ["bash", "-c", f'eval "$(cat {tmp_path}/env.sh)"; echo "$HELM_KUBECONTEXT"; '
         'eval "set -- ${BASH_ALIASES[kubectl]}"; printf "%s\\n" "$@"'],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert bash.stdout.splitlines() == ["b c", "kubectl", "--context", "b c"]
