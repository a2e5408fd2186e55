output "cluster_name" {
  description = "Name of the kind cluster (the kubeconfig context is kind-<name>)."
  value       = kind_cluster.this.name
}

output "kubeconfig_path" {
  description = "Path of the kubeconfig file the provider wrote."
  value       = kind_cluster.this.kubeconfig_path
}

output "kubeconfig" {
  description = "The cluster's kubeconfig as YAML."
  value       = kind_cluster.this.kubeconfig
  sensitive   = true
}

output "endpoint" {
  description = "URL of the cluster's API server."
  value       = kind_cluster.this.endpoint
}

