variable "name" {
  description = "Load balancer name and prefix of its resources (at most 26 characters)."
  type        = string
}

variable "vpc_id" {
  description = "VPC of the load balancer and its targets."
  type        = string
}

variable "subnet_ids" {
  description = "Subnets of the load balancer (public unless internal)."
  type        = list(string)
}

variable "internal" {
  description = "An internal (VPC-only) load balancer."
  type        = bool
  default     = false
}

variable "allowed_cidrs" {
  description = "Networks allowed to reach ports 443 and 80."
  type        = list(string)
}

variable "certificate_arn" {
  description = "ACM certificate of the HTTPS listener."
  type        = string
}

variable "ssl_policy" {
  description = "TLS policy of the HTTPS listener."
  type        = string
  default     = "ELBSecurityPolicy-TLS13-1-2-2021-06"
}

variable "target_security_group_id" {
  description = "Security group of the tasks (egress from the load balancer to it)."
  type        = string
}

variable "http_port" {
  description = "fnserve --http-port."
  type        = number
}

variable "grpc_port" {
  description = "fnserve --grpc-port (must be above http_port: one egress rule spans both)."
  type        = number
}

variable "target_protocol" {
  description = "HTTP (plaintext inside the VPC) or HTTPS (tasks run with --tls-cert)."
  type        = string
}

variable "deregistration_delay_s" {
  description = "Seconds a draining target keeps its in-flight requests."
  type        = number
}

variable "idle_timeout_s" {
  description = "Load balancer idle timeout (keep it below fnserve's --keep-alive-timeout, 75 s)."
  type        = number
  default     = 60
}

variable "deletion_protection" {
  description = "Refuse to delete the load balancer."
  type        = bool
  default     = false
}
