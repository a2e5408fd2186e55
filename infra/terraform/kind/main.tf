provider "kind" {}

locals {
  kubeconfig_path = var.kubeconfig_path != "" ? var.kubeconfig_path : "${abspath(path.module)}/kubeconfig"
  # kind has no tags; node labels carry the run id so a leftover cluster can be traced to its run.
  node_labels = {
    "kuberay-conformance.io/run-id" = var.run_id
  }
  # The GPU worker looks like an EKS GPU node (infra/terraform/eks gpu_node_labels, gpu_taint); the
  # harness advertises a simulated nvidia.com/gpu on it after apply, as a device plugin would.
  gpu_node_labels = merge(local.node_labels, {
    "nvidia.com/gpu.present"            = "true"
    "kuberay-conformance.io/gpu"        = "true"
    "kuberay-conformance.io/node-group" = "gpu"
  })
  gpu_taint_patch = <<-EOT
    kind: JoinConfiguration
    nodeRegistration:
      taints:
        - key: nvidia.com/gpu
          value: present
          effect: NoSchedule
  EOT
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

    dynamic "node" {
      for_each = range(var.gpu_worker_count)
      content {
        role                   = "worker"
        labels                 = local.gpu_node_labels
        kubeadm_config_patches = [local.gpu_taint_patch]
      }
    }
  }
}
