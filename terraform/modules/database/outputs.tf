output "address" {
  description = "Host name of the database."
  value       = aws_db_instance.jobs.address
}

output "port" {
  description = "Port of the database."
  value       = aws_db_instance.jobs.port
}

output "endpoint" {
  description = "host:port of the database."
  value       = aws_db_instance.jobs.endpoint
}

output "database" {
  description = "Database name."
  value       = aws_db_instance.jobs.db_name
}

output "username" {
  description = "Master user name."
  value       = aws_db_instance.jobs.username
}

output "master_secret_arn" {
  description = "Secrets Manager secret (JSON with username and password) that RDS manages."
  value       = aws_db_instance.jobs.master_user_secret[0].secret_arn
}
