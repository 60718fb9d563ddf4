output "dns_name" {
  description = "DNS name of the load balancer (point your domain's record at it)."
  value       = aws_lb.this.dns_name
}

output "arn_suffix" {
  description = "Load balancer ARN suffix (CloudWatch dimension)."
  value       = aws_lb.this.arn_suffix
}

output "security_group_id" {
  description = "Security group of the load balancer."
  value       = aws_security_group.alb.id
}

output "http_target_group_arn" {
  description = "Target group of the HTTP port."
  value       = aws_lb_target_group.http.arn
}

output "grpc_target_group_arn" {
  description = "Target group of the gRPC port."
  value       = aws_lb_target_group.grpc.arn
}

output "http_target_group_arn_suffix" {
  description = "HTTP target group ARN suffix (ALBRequestCountPerTarget label)."
  value       = aws_lb_target_group.http.arn_suffix
}

output "grpc_target_group_arn_suffix" {
  description = "gRPC target group ARN suffix (ALBRequestCountPerTarget label)."
  value       = aws_lb_target_group.grpc.arn_suffix
}
