terraform {
  # OpenTofu 1.6+ or Terraform 1.6+: `workspace select -or-create` and the checks below need it.
  required_version = ">= 1.6.0"

  required_providers {
    kind = {
      source  = "tehcyx/kind"
      version = "~> 0.11.0"
    }
  }
}
