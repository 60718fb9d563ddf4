terraform {
  # 1.7: `terraform test` with mock providers (tests/*.tftest.hcl run offline)
  required_version = ">= 1.7.0"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 5.100"
    }
  }
}

provider "aws" {
  region = var.region
  default_tags {
    tags = merge({ Application = "fnserve", Stack = var.name }, var.tags)
  }
}
