# The NVIDIA AMI brings the driver and container toolkit; the device plugin advertises the
# GPUs to Kubernetes as nvidia.com/gpu, which the profiles' GPU checks request.
resource "helm_release" "nvidia_device_plugin" {
  name             = "nvidia-device-plugin"
  namespace        = "nvidia-device-plugin"
  create_namespace = true
  repository       = "https://nvidia.github.io/k8s-device-plugin"
  chart            = "nvidia-device-plugin"
  version          = var.nvidia_device_plugin_version

  values = [yamlencode({
    nodeSelector = { "nvidia.com/gpu.present" = "true" }
    tolerations = [{
      key      = local.gpu_taint.key
      operator = "Exists"
      effect   = "NoSchedule"
    }]
  })]

  # With the GPU group at size 0 there is no node to run on yet; do not wait for one.
  wait       = false
  depends_on = [module.eks]
}
