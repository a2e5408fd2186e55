variable "cluster_name" {
  description = "Name of the kind cluster; also the prefix of its node containers (<name>-control-plane)."
  type        = string

  validation {
    # kind names its containers and kubeconfig context after it, so it must be a DNS label.
    condition     = can(regex("^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$", var.cluster_name))
    error_message = "cluster_name must be 1-40 characters of a-z, 0-9 and '-', starting and ending alphanumeric."
  }
}

variable "node_image_version" {
  description = "Kubernetes version of the kind node image kindest/node:<version>, optionally pinned by digest (v1.35.0@sha256:...)."
  type        = string
  default     = "v1.35.0"

  validation {
    condition     = can(regex("^v1\\.[0-9]+\\.[0-9]+(@sha256:[0-9a-f]{64})?$", var.node_image_version))
    error_message = "node_image_version must look like v1.35.0 or v1.35.0@sha256:<64 hex digits>."
  }
}

variable "worker_count" {
  description = "Number of worker nodes beside the control-plane node."
  type        = number
  default     = 2

  validation {
    # Each node is a container on the CI runner; more than a handful starves it.
    condition     = var.worker_count >= 0 && var.worker_count <= 6 && floor(var.worker_count) == var.worker_count
    error_message = "worker_count must be a whole number from 0 to 6."
  }
}

variable "gpu_worker_count" {
  description = "Worker nodes that look like EKS GPU nodes (labels and the nvidia.com/gpu taint); the harness advertises simulated GPUs on them."
  type        = number
  default     = 1

  validation {
    condition     = var.gpu_worker_count >= 0 && var.gpu_worker_count <= 2 && floor(var.gpu_worker_count) == var.gpu_worker_count
    error_message = "gpu_worker_count must be a whole number from 0 to 2."
  }
}

variable "kubeconfig_path" {
  description = "Where the provider writes the cluster's kubeconfig; empty means next to the state (<module>/kubeconfig)."
  type        = string
  default     = ""

  validation {
    condition     = var.kubeconfig_path == "" || startswith(var.kubeconfig_path, "/")
    error_message = "kubeconfig_path must be empty or an absolute path."
  }
}

variable "run_id" {
  description = "The conformance run this cluster belongs to; set as a label on every node."
  type        = string
  default     = "manual"

  validation {
    condition     = can(regex("^[A-Za-z0-9]([-_.A-Za-z0-9]{0,61}[A-Za-z0-9])?$", var.run_id))
    error_message = "run_id must be a valid Kubernetes label value (at most 63 characters)."
  }
}
