variable "bucket_name" {
  description = "Name of the model repository bucket (globally unique)."
  type        = string
}

variable "kms_key_arn" {
  description = "KMS key for SSE-KMS; null: SSE-S3 (AES256)."
  type        = string
  default     = null
}

variable "force_destroy" {
  description = "Let `terraform destroy` delete a bucket that still holds objects."
  type        = bool
  default     = false
}

variable "noncurrent_version_days" {
  description = "Days a replaced model file version is kept for rollbacks."
  type        = number
  default     = 90
}
