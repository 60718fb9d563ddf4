variable "name" {
  description = "Service, task family and log group name."
  type        = string
}

variable "region" {
  description = "Region of the log group."
  type        = string
}

variable "cluster_arn" {
  description = "ECS cluster ARN."
  type        = string
}

variable "cluster_name" {
  description = "ECS cluster name (in the scaling resource id)."
  type        = string
}

variable "compute" {
  description = "\"gpu\" (EC2 capacity provider, GPU reserved) or \"fargate\"."
  type        = string
}

variable "capacity_provider" {
  description = "Capacity provider of the service."
  type        = string
}

variable "image" {
  description = "Container image."
  type        = string
}

variable "command" {
  description = "Arguments after the image's `fnserve serve` entrypoint."
  type        = list(string)
}

variable "environment" {
  description = "Plain environment variables."
  type        = map(string)
  default     = {}
}

variable "secrets" {
  description = "Environment variables read from Secrets Manager at task start (name => valueFrom)."
  type        = map(string)
  default     = {}
}

variable "sidecars" {
  description = "Further container definitions of the task."
  type        = list(any)
  default     = []
}

variable "cpu" {
  description = "Task CPU units (1024 = 1 vCPU)."
  type        = number
}

variable "memory_mib" {
  description = "Task memory, MiB."
  type        = number
}

variable "gpus" {
  description = "GPUs reserved per task (gpu compute only)."
  type        = number
  default     = 0
}

variable "http_port" {
  description = "fnserve --http-port."
  type        = number
}

variable "grpc_port" {
  description = "fnserve --grpc-port."
  type        = number
}

variable "metrics_port" {
  description = "fnserve --metrics-port."
  type        = number
}

variable "stop_timeout_s" {
  description = "Seconds between SIGTERM and SIGKILL (fnserve drains meanwhile; ECS allows 120 at most)."
  type        = number
}

variable "health_start_period_s" {
  description = "Seconds a starting task has before failed health checks count (model loads)."
  type        = number
}

variable "execution_role_arn" {
  description = "Task execution role."
  type        = string
}

variable "task_role_arn" {
  description = "Task role (what fnserve itself may do)."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets of the tasks."
  type        = list(string)
}

variable "security_group_ids" {
  description = "Security groups of the tasks."
  type        = list(string)
}

variable "target_group_arns" {
  description = "Load balancer target groups by kind: keys \"http\" and/or \"grpc\"."
  type        = map(string)
  default     = {}
}

variable "min_capacity" {
  description = "Fewest tasks (0 lets the service scale to zero)."
  type        = number
}

variable "max_capacity" {
  description = "Most tasks."
  type        = number
}

variable "log_retention_days" {
  description = "Days the container logs are kept."
  type        = number
}
