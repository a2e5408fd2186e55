variable "region" {
  description = "AWS region to create the cluster in; only regions with EKS and the GPU instance families offered here."
  type        = string

  validation {
    # Kept equal to SUPPORTED_REGIONS in conformance/providers/eks.py (a unit test compares them).
    condition = contains([
      "us-east-1", "us-east-2", "us-west-2",
      "eu-west-1", "eu-west-2", "eu-central-1", "eu-north-1",
      "ap-northeast-1", "ap-southeast-1", "ap-southeast-2", "ap-south-1",
      "ca-central-1",
    ], var.region)
    error_message = "region must be one of the regions listed in infra/terraform/eks/README.md."
  }
}

variable "cluster_name" {
  description = "Name of the EKS cluster, its VPC and node groups; short, because IAM name prefixes derive from it."
  type        = string

  validation {
    condition     = can(regex("^[a-z][-a-z0-9]{0,22}$", var.cluster_name))
    error_message = "cluster_name must start with a letter and be 1-23 characters of a-z, 0-9 and '-'."
  }
}

variable "kubernetes_version" {
  description = "Kubernetes minor version of the control plane and node groups, e.g. 1.35."
  type        = string
  default     = "1.35"

  validation {
    condition     = can(regex("^1\\.[0-9]{2}$", var.kubernetes_version))
    error_message = "kubernetes_version must be a minor version such as 1.35."
  }
}

variable "owner" {
  description = "Who answers for this cluster (a person, team or CI job); tagged on every resource."
  type        = string

  validation {
    condition     = length(trimspace(var.owner)) > 0 && length(var.owner) <= 128
    error_message = "owner must be a non-empty string of at most 128 characters."
  }
}

variable "run_id" {
  description = "The conformance run this cluster belongs to; tagged on every resource."
  type        = string

  validation {
    condition     = can(regex("^[A-Za-z0-9][-_.A-Za-z0-9]{0,62}$", var.run_id))
    error_message = "run_id must be 1-63 characters of letters, digits, '-', '_' and '.'."
  }
}

variable "expires_at" {
  description = "RFC 3339 time after which the cluster may be destroyed by anyone (the run's budget guard does it); tagged on every resource."
  type        = string

  validation {
    condition     = can(timeadd(var.expires_at, "0s"))
    error_message = "expires_at must be an RFC 3339 timestamp such as 2026-11-29T21:00:00Z."
  }
}

variable "vpc_cidr" {
  description = "CIDR block of the cluster's VPC."
  type        = string
  default     = "10.42.0.0/16"

  validation {
    condition     = can(cidrhost(var.vpc_cidr, 0)) && tonumber(split("/", var.vpc_cidr)[1]) <= 18
    error_message = "vpc_cidr must be an IPv4 CIDR block of /18 or larger."
  }
}

variable "availability_zone_count" {
  description = "How many availability zones the VPC spans (EKS needs at least two)."
  type        = number
  default     = 2

  validation {
    condition     = contains([2, 3], var.availability_zone_count)
    error_message = "availability_zone_count must be 2 or 3."
  }
}

variable "endpoint_public_access_cidrs" {
  description = "Networks allowed to reach the public API endpoint (the harness runs outside the VPC); authentication is still required."
  type        = list(string)
  default     = ["0.0.0.0/0"]

  validation {
    condition     = length(var.endpoint_public_access_cidrs) > 0 && alltrue([for c in var.endpoint_public_access_cidrs : can(cidrhost(c, 0))])
    error_message = "endpoint_public_access_cidrs must be a non-empty list of CIDR blocks."
  }
}

variable "cpu_node_group" {
  description = "The CPU managed node group: it runs the KubeRay operator, Ray heads and CPU workers."
  type = object({
    instance_types = list(string)
    min_size       = number
    max_size       = number
    desired_size   = number
  })
  default = {
    instance_types = ["m5.xlarge"]
    min_size       = 1
    max_size       = 4
    desired_size   = 3
  }

  validation {
    condition = (
      length(var.cpu_node_group.instance_types) > 0 &&
      var.cpu_node_group.min_size >= 1 &&
      var.cpu_node_group.min_size <= var.cpu_node_group.desired_size &&
      var.cpu_node_group.desired_size <= var.cpu_node_group.max_size
    )
    error_message = "cpu_node_group needs instance types and 1 <= min_size <= desired_size <= max_size."
  }
}

variable "gpu_node_group" {
  description = "The GPU managed node group (NVIDIA AMI, tainted nvidia.com/gpu=present:NoSchedule); min_size 0 lets it scale to zero."
  type = object({
    instance_types = list(string)
    ami_type       = optional(string, "AL2023_x86_64_NVIDIA")
    min_size       = number
    max_size       = number
    desired_size   = number
    disk_size_gib  = optional(number, 100)
  })
  default = {
    instance_types = ["g5.xlarge"]
    min_size       = 0
    max_size       = 2
    desired_size   = 1
  }

  validation {
    condition = (
      length(var.gpu_node_group.instance_types) > 0 &&
      contains(["AL2023_x86_64_NVIDIA", "AL2023_ARM_64_NVIDIA", "BOTTLEROCKET_x86_64_NVIDIA", "BOTTLEROCKET_ARM_64_NVIDIA"], var.gpu_node_group.ami_type) &&
      var.gpu_node_group.min_size >= 0 &&
      var.gpu_node_group.min_size <= var.gpu_node_group.desired_size &&
      var.gpu_node_group.desired_size <= var.gpu_node_group.max_size &&
      var.gpu_node_group.disk_size_gib >= 50
    )
    error_message = "gpu_node_group needs instance types, an NVIDIA ami_type, 0 <= min_size <= desired_size <= max_size and disk_size_gib >= 50 (Ray GPU images are large)."
  }
}

variable "gpu_node_labels" {
  description = "Labels on GPU nodes. nvidia.com/gpu.present lets the NVIDIA device plugin schedule there; the profiles select GPU nodes by kuberay-conformance.io/gpu."
  type        = map(string)
  default = {
    "nvidia.com/gpu.present"     = "true"
    "kuberay-conformance.io/gpu" = "true"
  }

  validation {
    condition     = lookup(var.gpu_node_labels, "nvidia.com/gpu.present", "") == "true"
    error_message = "gpu_node_labels must keep nvidia.com/gpu.present = \"true\": the device plugin's node affinity needs it."
  }
}

variable "nvidia_device_plugin_version" {
  description = "Version of the nvidia-device-plugin Helm chart that advertises nvidia.com/gpu on GPU nodes."
  type        = string
  default     = "0.18.2"

  validation {
    condition     = can(regex("^[0-9]+\\.[0-9]+\\.[0-9]+$", var.nvidia_device_plugin_version))
    error_message = "nvidia_device_plugin_version must be a chart version such as 0.18.2."
  }
}

variable "enable_karpenter" {
  description = "Also install Karpenter with one CPU and one GPU NodePool, for autoscaling beyond the managed node groups."
  type        = bool
  default     = false
}

variable "karpenter_version" {
  description = "Version of the Karpenter Helm chart (only with enable_karpenter); 1.11 supports Kubernetes 1.29-1.35."
  type        = string
  default     = "1.11.1"

  validation {
    condition     = can(regex("^1\\.[0-9]+\\.[0-9]+$", var.karpenter_version))
    error_message = "karpenter_version must be a 1.x.y chart version."
  }
}
