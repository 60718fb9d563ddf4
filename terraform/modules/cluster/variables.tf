variable "name" {
  description = "Cluster name and prefix of its resources."
  type        = string
}

variable "compute" {
  description = "\"gpu\" (EC2 GPU instances) or \"fargate\" (CPU only)."
  type        = string
}

variable "vpc_id" {
  description = "VPC of the instances."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets of the GPU instances."
  type        = list(string)
}

variable "gpu_instance_type" {
  description = "EC2 instance type of the GPU capacity."
  type        = string
}

variable "gpu_instances_max" {
  description = "Most GPU instances the Auto Scaling group may run."
  type        = number
}

variable "gpu_ami_ssm_parameter" {
  description = "Public SSM parameter naming the ECS GPU-optimized AMI."
  type        = string
}

variable "root_volume_gb" {
  description = "Root volume of a GPU instance (images and the model cache live there)."
  type        = number
  default     = 100
}
