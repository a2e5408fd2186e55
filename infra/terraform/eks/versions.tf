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

  # No backend block here: the harness writes the one it is given (KRC_TF_BACKEND +
  # KRC_TF_BACKEND_CONFIG) into the run's copy. The eks provider refuses to run without one, so the
  # reaper can destroy what a lost run left (docs/eks.md). S3's use_lockfile needs 1.10 or newer.
}
