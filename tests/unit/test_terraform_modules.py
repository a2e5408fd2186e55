"""infra/terraform: `tofu fmt -check` with OpenTofu built from its Go module, and the structure of
every .tf file as parsed by python-hcl2 (node groups, the GPU taint, typed and validated inputs,
tags on everything AWS makes). `tofu validate` is not here: see infra/terraform/README.md for why.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import hcl2
import pytest
import yaml
from hcl2 import SerializationOptions

from conformance.build import gobuild
from conformance.build.cache import cache_dir
from conformance.providers.eks import SUPPORTED_REGIONS
from conformance.providers.kind_terraform import GPU_NODE_SELECTOR as KIND_GPU_SELECTOR
from conformance.providers.terraform import TOFU_TOOL

INFRA = Path(__file__).resolve().parents[2] / "infra" / "terraform"
MODULES = ("kind", "eks")
_OPTIONS = SerializationOptions(with_comments=False, explicit_blocks=False, strip_string_quotes=True)


def load(module: str) -> dict[str, Any]:
    """Every block of a module's .tf files, keyed by kind and then by name."""
    merged: dict[str, Any] = {"variable": {}, "output": {}, "resource": {}, "data": {}, "module": {}}
    merged.update(provider={}, locals={}, terraform=[])
    for path in sorted((INFRA / module).glob("*.tf")):
        parsed = hcl2.loads(path.read_text(), serialization_options=_OPTIONS)
        for kind, blocks in parsed.items():
            for block in blocks:
                if kind == "terraform":
                    merged["terraform"].append(block)
                elif kind == "locals":
                    merged["locals"].update(block)
                elif kind in ("resource", "data"):
                    for rtype, named in block.items():
                        for name, body in named.items():
                            merged[kind][(rtype, name)] = body
                else:
                    merged[kind].update(block)
    return merged


@pytest.fixture(scope="module", params=MODULES)
def module(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return request.param, load(request.param)


@pytest.fixture(scope="module")
def eks() -> dict[str, Any]:
    return load("eks")


@pytest.fixture(scope="session")
def tofu() -> Path:
    """OpenTofu from its Go module, built on first use and cached (conformance/build/gobuild.py)."""
    return gobuild.ensure_built(TOFU_TOOL, cache_dir()) / "tofu"


def run_tofu(tofu: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """tofu with a CLI configuration of the test's own: the machine's (TF_CLI_CONFIG_FILE) is not
    ours to depend on, and nothing may reach a registry."""
    config = tmp_path / "tofurc"
    config.write_text("disable_checkpoint = true\n")
    env = {**os.environ, "TF_CLI_CONFIG_FILE": str(config), "CHECKPOINT_DISABLE": "1"}
    return subprocess.run([str(tofu), *args], capture_output=True, text=True, env=env, check=False)


# --- tofu itself -----------------------------------------------------------------------------------


def test_tofu_fmt_check_is_clean(tofu: Path, tmp_path: Path) -> None:
    done = run_tofu(tofu, tmp_path, "fmt", "-check", "-recursive", "-diff", str(INFRA))
    assert done.returncode == 0, f"run `tofu fmt -recursive infra/terraform`:\n{done.stdout}{done.stderr}"


def test_tofu_fmt_check_fails_on_a_badly_formatted_file(tofu: Path, tmp_path: Path) -> None:
    # The check above is only worth something if it can fail.
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "main.tf").write_text('variable "x" {\ntype=string\n}\n')
    done = run_tofu(tofu, tmp_path, "fmt", "-check", str(tmp_path / "bad"))
    assert done.returncode != 0


def test_tofu_loads_the_kind_module_and_names_its_providers(tofu: Path, tmp_path: Path) -> None:
    """`tofu providers` decodes the whole configuration (variables, validations, references) with
    OpenTofu's own loader; it needs no provider binary, so it runs where validate cannot."""
    work = tmp_path / "kind"
    shutil.copytree(INFRA / "kind", work)
    done = run_tofu(tofu, tmp_path, f"-chdir={work}", "providers", "-no-color")
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr
    assert "provider[registry.opentofu.org/tehcyx/kind] ~> 0.11.0" in done.stdout


# --- conventions both modules follow ------------------------------------------------------------------


def test_every_variable_has_a_type_a_description_and_validation(module: tuple[str, dict[str, Any]]) -> None:
    name, parsed = module
    assert parsed["variable"], f"{name} has no variables"
    for var, body in parsed["variable"].items():
        assert body.get("type"), f"{name}: variable {var} has no type"
        assert len(body.get("description", "")) > 10, f"{name}: variable {var} has no description"
        if body["type"] != "bool":  # a bool has nothing to validate
            assert body.get("validation"), f"{name}: variable {var} has no validation block"


def test_every_output_has_a_description_and_the_kubeconfig_is_one(module: tuple[str, dict[str, Any]]) -> None:
    name, parsed = module
    for output, body in parsed["output"].items():
        assert body.get("description"), f"{name}: output {output} has no description"
    # The harness reads the cluster's kubeconfig from this output (terraform.py).
    assert parsed["output"]["kubeconfig"].get("sensitive") is True


def test_versions_tf_pins_every_provider_the_module_uses(module: tuple[str, dict[str, Any]]) -> None:
    name, parsed = module
    assert (INFRA / name / "versions.tf").exists()
    (settings,) = parsed["terraform"]
    assert settings["required_version"].startswith(">=")
    required = settings["required_providers"]
    if isinstance(required, list):  # python-hcl2 gives a block as a list of its bodies
        required = {k: v for body in required for k, v in body.items()}
    for local_name, spec in required.items():
        assert "/" in spec["source"] and spec["version"], f"{name}: provider {local_name} is not pinned"
    used = {rtype.split("_", 1)[0] for rtype, _ in [*parsed["resource"], *parsed["data"]]}
    assert used <= set(required), f"{name}: providers used but not pinned: {used - set(required)}"


def test_the_module_readme_lists_every_input_and_output(module: tuple[str, dict[str, Any]]) -> None:
    name, parsed = module
    readme = (INFRA / name / "README.md").read_text()
    for item in [*parsed["variable"], *parsed["output"]]:
        assert f"`{item}`" in readme, f"infra/terraform/{name}/README.md does not mention `{item}`"


# --- kind ------------------------------------------------------------------------------------------


def test_kind_cluster_takes_the_image_version_and_worker_count() -> None:
    parsed = load("kind")
    cluster = parsed["resource"][("kind_cluster", "this")]
    assert cluster["name"] == "${var.cluster_name}"
    assert "${var.node_image_version}" in cluster["node_image"]
    (config,) = cluster["kind_config"]
    assert config["node"][0]["role"] == "control-plane"
    workers, gpu_workers = config["dynamic"]
    assert workers["node"]["for_each"] == "${range(var.worker_count)}"
    assert workers["node"]["content"][0]["role"] == "worker"
    assert gpu_workers["node"]["for_each"] == "${range(var.gpu_worker_count)}"


def test_kind_gpu_workers_look_like_eks_gpu_nodes() -> None:
    """The labels and taint of infra/terraform/eks's GPU group, which the GPU checks expect, and
    the label the kind provider finds them by to advertise their simulated GPUs."""
    parsed = load("kind")
    eks_labels = load("eks")["variable"]["gpu_node_labels"]["default"]
    (config,) = parsed["resource"][("kind_cluster", "this")]["kind_config"]
    gpu = config["dynamic"][1]["node"]["content"][0]
    assert gpu["labels"] == "${local.gpu_node_labels}"
    labels = parsed["locals"]["gpu_node_labels"]  # an HCL merge(...) expression, as text
    for key, value in eks_labels.items():
        assert f'"{key}" = "{value}"' in labels, (key, labels)
    key, value = KIND_GPU_SELECTOR.split("=")
    assert f'"{key}" = "{value}"' in labels
    heredoc = parsed["locals"]["gpu_taint_patch"].removeprefix("<<-EOT").removesuffix("EOT")
    patch = yaml.safe_load(textwrap.dedent(heredoc))
    assert patch["nodeRegistration"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    ]


# --- eks -------------------------------------------------------------------------------------------


def test_eks_has_a_cpu_and_a_gpu_managed_node_group_with_sizes(eks: dict[str, Any]) -> None:
    groups = eks["module"]["eks"]["eks_managed_node_groups"]
    assert set(groups) == {"cpu", "gpu"}
    for group in groups.values():
        for size in ("min_size", "max_size", "desired_size"):
            assert size in group
    assert "AL2023_x86_64_NVIDIA" in eks["variable"]["gpu_node_group"]["type"], "the GPU group's default AMI"


def test_the_gpu_group_is_tainted_nvidia_gpu_present_noschedule(eks: dict[str, Any]) -> None:
    gpu = eks["module"]["eks"]["eks_managed_node_groups"]["gpu"]
    assert gpu["taints"] == {"gpu": "${local.gpu_taint}"}
    assert eks["locals"]["gpu_taint"] == {
        "key": "nvidia.com/gpu",
        "value": "present",
        "effect": "NO_SCHEDULE",
    }
    assert "nvidia.com/gpu=present:NoSchedule" in eks["output"]["gpu_taint"]["value"].replace(
        "${local.gpu_taint.key}=${local.gpu_taint.value}", "nvidia.com/gpu=present"
    )


def test_the_device_plugin_tolerates_the_taint_and_selects_the_gpu_label(eks: dict[str, Any]) -> None:
    plugin = eks["resource"][("helm_release", "nvidia_device_plugin")]
    assert plugin["chart"] == "nvidia-device-plugin"
    values = plugin["values"][0]
    assert '"nvidia.com/gpu.present" = "true"' in values, "selects the label the GPU group carries"
    assert "key = local.gpu_taint.key" in values and '"Exists"' in values
    assert eks["variable"]["gpu_node_labels"]["default"]["nvidia.com/gpu.present"] == "true"


def test_every_aws_resource_and_module_carries_owner_run_id_and_expiry(eks: dict[str, Any]) -> None:
    tags = eks["locals"]["tags"]
    assert tags["owner"] == "${var.owner}"
    assert tags["kuberay-conformance/run-id"] == "${var.run_id}"
    assert tags["kuberay-conformance/expires-at"] == "${var.expires_at}"
    (aws,) = [p["aws"] for p in [eks["provider"]] if "aws" in p]
    assert aws["default_tags"][0]["tags"] == "${local.tags}", "resources made inside modules get them too"
    for name, body in eks["module"].items():
        assert body.get("tags") == "${local.tags}", f"module {name} does not pass the tags"
    for (rtype, name), body in eks["resource"].items():
        if rtype.startswith("aws_"):
            assert "local.tags" in str(body.get("tags", "")), f"{rtype}.{name} has no tags"
    # Nodes Karpenter launches are tagged through the EC2NodeClass.
    assert "tags = local.tags" in eks["resource"][("helm_release", "karpenter_nodepools")]["values"][0]


def test_karpenter_is_only_made_when_enabled(eks: dict[str, Any]) -> None:
    parts = [b for (_, n), b in eks["resource"].items() if "karpenter" in n] + [eks["module"]["karpenter"]]
    assert len(parts) == 3
    for body in parts:
        assert body["count"] == "${var.enable_karpenter ? 1 : 0}"
    assert eks["variable"]["enable_karpenter"]["default"] is False


def test_the_nodepool_chart_has_a_cpu_and_a_tainted_gpu_pool() -> None:
    template = (INFRA / "eks" / "charts" / "karpenter-nodepools" / "templates" / "nodepools.yaml").read_text()
    assert re.search(r"kind: NodePool\nmetadata:\n  name: cpu\n", template)
    gpu = template.split("name: gpu\n", 1)[1]
    assert "taints:" in gpu and ".Values.gpuTaint.key" in gpu and "effect: NoSchedule" in gpu


def test_supported_regions_are_the_same_in_python_and_terraform(eks: dict[str, Any]) -> None:
    (validation,) = eks["variable"]["region"]["validation"]
    assert tuple(re.findall(r'"([a-z]{2}-[a-z]+-\d)"', validation["condition"])) == SUPPORTED_REGIONS


def test_every_reference_names_something_the_module_declares(module: tuple[str, dict[str, Any]]) -> None:
    """Part of what `tofu validate` would check, for the modules it cannot run on here."""
    name, parsed = module
    text = "\n".join(p.read_text() for p in (INFRA / name).glob("*.tf"))
    declared = {
        "var": set(parsed["variable"]),
        "local": set(parsed["locals"]),
        "module": set(parsed["module"]),
        "data": {f"{t}.{n}" for t, n in parsed["data"]},
    }
    for kind, pattern in (
        ("var", r"\bvar\.(\w+)"),
        ("local", r"\blocal\.(\w+)"),
        ("module", r"\bmodule\.(\w+)"),
    ):
        assert set(re.findall(pattern, text)) <= declared[kind], f"{name}: undeclared {kind} references"
    assert set(re.findall(r"\bdata\.(\w+\.\w+)", text)) <= declared["data"]
    resources = {f"{t}.{n}" for t, n in parsed["resource"]}
    # A resource reference is <type>.<name> not preceded by `data.` (nor by any other word).
    used = set(re.findall(r"(?<![\w.])((?:kind|helm|aws)_\w+\.\w+)", text))
    assert used <= resources, f"{name}: references to undeclared resources {used - resources}"
