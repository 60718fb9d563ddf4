output "execution_role_arn" {
  description = "Task execution role (image pull, logs, secrets)."
  value       = aws_iam_role.execution.arn
}

output "online_task_role_arn" {
  description = "Task role of the online service."
  value       = aws_iam_role.online.arn
}

output "worker_task_role_arn" {
  description = "Task role of the job-worker service."
  value       = aws_iam_role.worker.arn
}
