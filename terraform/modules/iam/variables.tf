variable "name" {
  description = "Prefix of the role names."
  type        = string
}

variable "bucket_arn" {
  description = "Model repository bucket."
  type        = string
}

variable "model_prefix" {
  description = "Key prefix of the model repository in the bucket (no slashes at either end)."
  type        = string
}

variable "secret_arns" {
  description = "Secrets the task definitions inject (tokens, database password)."
  type        = list(string)
}

variable "metrics_log_group_arn" {
  description = "Log group the online task's CloudWatch agent writes embedded metrics to."
  type        = string
}
