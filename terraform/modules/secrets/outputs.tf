output "admin_token_arn" {
  description = "Secret holding the admin token."
  value       = aws_secretsmanager_secret.token["admin"].arn
}

output "api_token_arn" {
  description = "Secret holding the API token."
  value       = aws_secretsmanager_secret.token["api"].arn
}
