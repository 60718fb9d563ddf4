variable "name" {
  description = "Prefix of every resource name."
  type        = string
}

variable "cidr" {
  description = "CIDR block of a new VPC (ignored with existing_vpc_id)."
  type        = string
}

variable "az_count" {
  description = "Availability zones a new VPC spans."
  type        = number
}

variable "nat_gateway_per_az" {
  description = "One NAT gateway per AZ (true) or one shared (false, cheaper)."
  type        = bool
  default     = false
}

variable "existing_vpc_id" {
  description = "Use this VPC instead of creating one (null: create)."
  type        = string
  default     = null
}

variable "existing_public_subnet_ids" {
  description = "Public subnets of existing_vpc_id, for the load balancer."
  type        = list(string)
  default     = []
}

variable "existing_private_subnet_ids" {
  description = "Private subnets of existing_vpc_id (with a route to the internet or VPC endpoints), for tasks, instances and the database."
  type        = list(string)
  default     = []
}
