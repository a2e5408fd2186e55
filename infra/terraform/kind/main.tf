provider "kind" {}

locals {
  kubeconfig_path = var.kubeconfig_path != "" ? var.kubeconfig_path : "${abspath(path.module)}/kubeconfig"
  # kind has no tags; node labels carry the run id so a leftover cluster can be traced to its run.
  node_labels = {
    "kuberay-conformance.io/run-id" = var.run_id
  }
}

resource "kind_cluster" "this" {
  name            = var.cluster_name
  node_image      = "kindest/node:${var.node_image_version}"
  kubeconfig_path = local.kubeconfig_path
  # The harness installs KubeRay right after apply; an API server that is not ready yet would fail it.
  wait_for_ready = true

  kind_config {
    kind        = "Cluster"
    api_version = "kind.x-k8s.io/v1alpha4"

    node {
      role   = "control-plane"
      labels = local.node_labels
    }

    dynamic "node" {
      for_each = range(var.worker_count)
      content {
        role   = "worker"
        labels = local.node_labels
      }
    }
  }
}
