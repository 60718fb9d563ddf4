variable "name" {
  description = "Prefix of the secret names."
  type        = string
}

variable "kms_key_arn" {
  description = "KMS key of the secrets; null: the AWS-managed Secrets Manager key."
  type        = string
  default     = null
}

variable "recovery_window_days" {
  description = "Days a deleted secret can still be restored (0: delete at once)."
  type        = number
  default     = 7
}
