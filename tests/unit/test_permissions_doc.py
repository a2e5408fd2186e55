"""docs/permissions.md lists exactly the rules of the ClusterRole the read-path check binds."""

from __future__ import annotations

import re
from pathlib import Path

from conformance.kube.manifests import render_all

ROOT = Path(__file__).resolve().parents[2]


def test_permissions_doc_lists_every_rule_of_the_reader_role() -> None:
    role, _binding = render_all("rbac/harness-reader.yaml", name="r", service_account="s", namespace="n")
    doc = (ROOT / "docs" / "permissions.md").read_text()
    read = doc.split("## Read", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in read.splitlines() if line.startswith("| `")]
    for rule in role["rules"]:
        group = rule["apiGroups"][0] or '""'  # the doc writes the core group as `""`
        matching = [r for r in rows if re.match(rf"\| `{re.escape(group)}`", r)]
        for resource in rule["resources"]:
            row = next((r for r in matching if resource in r.split("|")[2]), None)
            assert row is not None, f"{group}/{resource} is not in docs/permissions.md"
            assert all(verb in row.split("|")[3] for verb in rule["verbs"]), (group, resource, row)
    assert len(rows) == len(role["rules"]), "the doc's Read table has rules the ClusterRole lacks"
