output "vpc_id" {
  description = "The VPC the fleet runs in."
  value       = var.existing_vpc_id == null ? aws_vpc.this[0].id : var.existing_vpc_id
}

output "public_subnet_ids" {
  description = "Subnets of the load balancer."
  value       = var.existing_vpc_id == null ? aws_subnet.public[*].id : var.existing_public_subnet_ids
}

output "private_subnet_ids" {
  description = "Subnets of tasks, GPU instances and the database."
  value       = var.existing_vpc_id == null ? aws_subnet.private[*].id : var.existing_private_subnet_ids
}
