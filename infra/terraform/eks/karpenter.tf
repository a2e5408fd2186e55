# Optional: Karpenter with a CPU and a GPU NodePool, for checks that scale past the managed groups.
module "karpenter" {
  source  = "terraform-aws-modules/eks/aws//modules/karpenter"
  version = "~> 21.0"
  count   = var.enable_karpenter ? 1 : 0

  cluster_name = module.eks.cluster_name
  region       = var.region

  # The EC2NodeClass names this role, so it needs a fixed name rather than a prefix.
  node_iam_role_use_name_prefix   = false
  node_iam_role_name              = "${var.cluster_name}-karpenter-node"
  create_pod_identity_association = true
  # Every name starts with the cluster's (krc-...), so the CI role's rights can be held to that
  # prefix (docs/eks.md): the controller's role and policy, the interruption queue and its rules.
  iam_role_name    = "${var.cluster_name}-karpenter"
  iam_policy_name  = "${var.cluster_name}-karpenter"
  queue_name       = "${var.cluster_name}-karpenter"
  rule_name_prefix = "${var.cluster_name}-"

  tags = local.tags
}

resource "helm_release" "karpenter" {
  count      = var.enable_karpenter ? 1 : 0
  name       = "karpenter"
  namespace  = "kube-system"
  repository = "oci://public.ecr.aws/karpenter"
  chart      = "karpenter"
  version    = var.karpenter_version

  values = [yamlencode({
    # Karpenter must not run on nodes it manages; the CPU managed group hosts it.
    nodeSelector = { "kuberay-conformance.io/node-group" = "cpu" }
    settings = {
      clusterName       = module.eks.cluster_name
      clusterEndpoint   = module.eks.cluster_endpoint
      interruptionQueue = module.karpenter[0].queue_name
    }
  })]
}

resource "helm_release" "karpenter_nodepools" {
  count     = var.enable_karpenter ? 1 : 0
  name      = "karpenter-nodepools"
  namespace = "kube-system"
  chart     = "${path.module}/charts/karpenter-nodepools"

  values = [yamlencode({
    clusterName      = var.cluster_name
    nodeRole         = module.karpenter[0].node_iam_role_name
    gpuInstanceTypes = var.gpu_node_group.instance_types
    gpuTaint         = { key = local.gpu_taint.key, value = local.gpu_taint.value }
    gpuLabels        = var.gpu_node_labels
    tags             = local.tags
  })]

  # The NodePool and EC2NodeClass kinds exist only once the Karpenter chart installed its CRDs.
  depends_on = [helm_release.karpenter]
}
