output "cluster_name" {
  description = "ECS cluster name."
  value       = aws_ecs_cluster.this.name
}

output "cluster_arn" {
  description = "ECS cluster ARN."
  value       = aws_ecs_cluster.this.arn
}

output "capacity_provider" {
  description = "Capacity provider services run on."
  value       = var.compute == "gpu" ? aws_ecs_capacity_provider.gpu[0].name : "FARGATE"
  # A service may only use a capacity provider once it is attached to the cluster.
  depends_on = [aws_ecs_cluster_capacity_providers.this]
}

output "autoscaling_group_name" {
  description = "GPU Auto Scaling group (null on Fargate)."
  value       = var.compute == "gpu" ? aws_autoscaling_group.gpu[0].name : null
}
