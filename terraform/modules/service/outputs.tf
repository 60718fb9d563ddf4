output "service_name" {
  description = "ECS service name."
  value       = aws_ecs_service.this.name
}

output "task_definition_arn" {
  description = "Current task definition."
  value       = aws_ecs_task_definition.this.arn
}

output "container_definitions" {
  description = "The task's container definitions (decoded)."
  value       = jsondecode(aws_ecs_task_definition.this.container_definitions)
}

output "log_group_name" {
  description = "Log group of the fnserve container."
  value       = aws_cloudwatch_log_group.this.name
}

output "scaling_resource_id" {
  description = "Application Auto Scaling resource id."
  value       = aws_appautoscaling_target.this.resource_id
}

output "scalable_dimension" {
  description = "Application Auto Scaling dimension."
  value       = aws_appautoscaling_target.this.scalable_dimension
}

output "min_capacity" {
  description = "Fewest tasks."
  value       = aws_appautoscaling_target.this.min_capacity
}

output "max_capacity" {
  description = "Most tasks."
  value       = aws_appautoscaling_target.this.max_capacity
}
