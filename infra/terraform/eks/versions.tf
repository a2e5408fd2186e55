terraform {
  required_version = ">= 1.6.0"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # terraform-aws-modules/eks 21.x needs 6.28 or newer.
      version = "~> 6.28"
    }
    helm = {
      source  = "hashicorp/helm"
      version = "~> 3.0"
    }
  }

  # No backend block: state is local (one directory per run) unless the harness is given a
  # backend (KRC_TF_BACKEND + KRC_TF_BACKEND_CONFIG), which it writes into the run's copy.
}
