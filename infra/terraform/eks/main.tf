provider "aws" {
  region = var.region

  # Every AWS resource, including those made inside the modules below, gets the run's tags.
  default_tags {
    tags = local.tags
  }
}

locals {
  tags = {
    "owner"                            = var.owner
    "kuberay-conformance/run-id"       = var.run_id
    "kuberay-conformance/expires-at"   = var.expires_at
    "kuberay-conformance/managed-by"   = "kuberay-conformance"
    "kuberay-conformance/cluster-name" = var.cluster_name
  }
  azs = slice(data.aws_availability_zones.available.names, 0, var.availability_zone_count)
  # Karpenter finds the subnets and security group to launch into by this tag.
  karpenter_discovery = var.enable_karpenter ? { "karpenter.sh/discovery" = var.cluster_name } : {}
  gpu_taint = {
    key    = "nvidia.com/gpu"
    value  = "present"
    effect = "NO_SCHEDULE"
  }
}

data "aws_availability_zones" "available" {
  # Local and Wavelength zones lack most instance types; keep to the region's own zones.
  filter {
    name   = "opt-in-status"
    values = ["opt-in-not-required"]
  }
}

module "vpc" {
  source  = "terraform-aws-modules/vpc/aws"
  version = "~> 6.0"

  name = var.cluster_name
  cidr = var.vpc_cidr
  azs  = local.azs

  private_subnets = [for index, _ in local.azs : cidrsubnet(var.vpc_cidr, 4, index)]
  public_subnets  = [for index, _ in local.azs : cidrsubnet(var.vpc_cidr, 8, index + 48)]

  # Nodes pull public images (Ray, KubeRay); one NAT gateway is enough for a test cluster.
  enable_nat_gateway = true
  single_nat_gateway = true

  public_subnet_tags  = { "kubernetes.io/role/elb" = 1 }
  private_subnet_tags = merge({ "kubernetes.io/role/internal-elb" = 1 }, local.karpenter_discovery)

  tags = local.tags
}

module "eks" {
  source  = "terraform-aws-modules/eks/aws"
  version = "~> 21.0"

  name               = var.cluster_name
  kubernetes_version = var.kubernetes_version

  endpoint_public_access       = true
  endpoint_public_access_cidrs = var.endpoint_public_access_cidrs
  # The identity that applies (the CI role) administers the cluster, so the harness can install KubeRay.
  enable_cluster_creator_admin_permissions = true

  # A cluster that lives for hours needs no customer KMS key (its deletion window outlives the run)
  # and no log group of its own.
  create_kms_key              = false
  encryption_config           = null
  create_cloudwatch_log_group = false
  enabled_log_types           = []

  addons = {
    coredns                = {}
    kube-proxy             = {}
    vpc-cni                = { before_compute = true }
    eks-pod-identity-agent = { before_compute = true }
  }

  vpc_id     = module.vpc.vpc_id
  subnet_ids = module.vpc.private_subnets

  eks_managed_node_groups = {
    cpu = {
      # IAM names start with the cluster's (krc-...), so the CI role's IAM rights can be held to
      # that prefix (docs/eks.md).
      iam_role_name  = "${var.cluster_name}-cpu"
      ami_type       = "AL2023_x86_64_STANDARD"
      instance_types = var.cpu_node_group.instance_types
      min_size       = var.cpu_node_group.min_size
      max_size       = var.cpu_node_group.max_size
      desired_size   = var.cpu_node_group.desired_size
      labels = {
        "kuberay-conformance.io/node-group" = "cpu"
      }
    }

    gpu = {
      iam_role_name  = "${var.cluster_name}-gpu"
      ami_type       = var.gpu_node_group.ami_type
      instance_types = var.gpu_node_group.instance_types
      min_size       = var.gpu_node_group.min_size
      max_size       = var.gpu_node_group.max_size
      desired_size   = var.gpu_node_group.desired_size
      labels         = merge(var.gpu_node_labels, { "kuberay-conformance.io/node-group" = "gpu" })
      # Only pods that ask for GPUs (and tolerate this) land here, so CPU pods never hold a GPU node.
      taints = {
        gpu = local.gpu_taint
      }
      block_device_mappings = {
        root = {
          device_name = "/dev/xvda"
          ebs = {
            volume_size           = var.gpu_node_group.disk_size_gib
            volume_type           = "gp3"
            delete_on_termination = true
          }
        }
      }
    }
  }

  node_security_group_tags = local.karpenter_discovery

  tags = local.tags
}

provider "helm" {
  kubernetes = {
    host                   = module.eks.cluster_endpoint
    cluster_ca_certificate = base64decode(module.eks.cluster_certificate_authority_data)
    # A short-lived token per call, as the harness's kubeconfig does; nothing long-lived is stored.
    exec = {
      api_version = "client.authentication.k8s.io/v1beta1"
      command     = "aws"
      args        = ["eks", "get-token", "--cluster-name", module.eks.cluster_name, "--region", var.region]
    }
  }
}
