output "cluster_name" {
  description = "Name of the EKS cluster."
  value       = module.eks.cluster_name
}

output "cluster_endpoint" {
  description = "URL of the cluster's API server."
  value       = module.eks.cluster_endpoint
}

output "region" {
  description = "Region the cluster runs in."
  value       = var.region
}

output "gpu_taint" {
  description = "The taint on GPU nodes, in kubectl form; GPU pods must tolerate it."
  value       = "${local.gpu_taint.key}=${local.gpu_taint.value}:NoSchedule"
}

output "gpu_node_labels" {
  description = "Labels every GPU node carries."
  value       = var.gpu_node_labels
}

output "kubeconfig" {
  description = "A kubeconfig for the cluster; it gets short-lived tokens from `aws eks get-token`, so it holds no secret."
  sensitive   = true
  value = yamlencode({
    apiVersion        = "v1"
    kind              = "Config"
    "current-context" = module.eks.cluster_name
    clusters = [{
      name = module.eks.cluster_name
      cluster = {
        server                       = module.eks.cluster_endpoint
        "certificate-authority-data" = module.eks.cluster_certificate_authority_data
      }
    }]
    contexts = [{
      name    = module.eks.cluster_name
      context = { cluster = module.eks.cluster_name, user = module.eks.cluster_name }
    }]
    users = [{
      name = module.eks.cluster_name
      user = {
        exec = {
          apiVersion = "client.authentication.k8s.io/v1beta1"
          command    = "aws"
          args       = ["eks", "get-token", "--cluster-name", module.eks.cluster_name, "--region", var.region]
        }
      }
    }]
  })
}
