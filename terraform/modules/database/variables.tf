variable "name" {
  description = "Prefix of every resource name."
  type        = string
}

variable "vpc_id" {
  description = "VPC of the database."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets (two AZs or more) for the DB subnet group."
  type        = list(string)
}

variable "client_security_group_id" {
  description = "Security group of the tasks allowed to connect."
  type        = string
}

variable "engine_version" {
  description = "PostgreSQL major version."
  type        = string
  default     = "16"
}

variable "instance_class" {
  description = "RDS instance class."
  type        = string
}

variable "allocated_storage_gb" {
  description = "Initial storage (grows to 4x automatically)."
  type        = number
}

variable "multi_az" {
  description = "A standby in a second AZ."
  type        = bool
}

variable "deletion_protection" {
  description = "Refuse deletion (and take a final snapshot when it is switched off)."
  type        = bool
}

variable "kms_key_arn" {
  description = "KMS key for storage encryption; null: the AWS-managed RDS key."
  type        = string
  default     = null
}

variable "database" {
  description = "Database name."
  type        = string
  default     = "fnserve"
}

variable "username" {
  description = "Master user name."
  type        = string
  default     = "fnserve"
}
