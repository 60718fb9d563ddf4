output "http_url" {
  description = "KServe v2 REST endpoint (through the load balancer, TLS)."
  value       = "https://${module.loadbalancer.dns_name}"
}

output "grpc_endpoint" {
  description = "gRPC endpoint (TLS): tritonclient.grpc.InferenceServerClient(url, ssl=True)."
  value       = "${module.loadbalancer.dns_name}:443"
}

output "load_balancer_dns_name" {
  description = "Point the certificate's domain name (CNAME or alias) here."
  value       = module.loadbalancer.dns_name
}

output "model_bucket" {
  description = "Model repository bucket: upload with `aws s3 sync model_repository/ s3://BUCKET/PREFIX/`."
  value       = module.storage.bucket
}

output "model_repository_url" {
  description = "What the tasks serve (`fnserve serve` argument)."
  value       = local.model_repo_url
}

output "db_endpoint" {
  description = "Jobs database host:port (private)."
  value       = module.database.endpoint
}

output "jobs_db_url" {
  description = "--jobs-db URL the tasks use (the password comes from PGPASSWORD)."
  value       = local.jobs_db_url
}

output "db_master_secret_arn" {
  description = "RDS-managed secret of the database password."
  value       = module.database.master_secret_arn
}

output "admin_token_secret_arn" {
  description = "Secret holding the admin bearer token."
  value       = module.secrets.admin_token_arn
}

output "api_token_secret_arn" {
  description = "Secret holding the API bearer token."
  value       = module.secrets.api_token_arn
}

output "cluster_name" {
  description = "ECS cluster."
  value       = module.cluster.cluster_name
}

output "online_service" {
  description = "ECS service behind the load balancer."
  value       = module.online.service_name
}

output "worker_service" {
  description = "ECS job-worker service (scales from zero)."
  value       = module.worker.service_name
}

output "log_groups" {
  description = "CloudWatch log groups: containers and the metrics sidecar."
  value = {
    online  = module.online.log_group_name
    worker  = module.worker.log_group_name
    metrics = aws_cloudwatch_log_group.metrics.name
  }
}

output "online_container_definitions" {
  description = "Container definitions of the online task (decoded), for inspection."
  value       = module.online.container_definitions
}

output "worker_scaling_bounds" {
  description = "Task count bounds of the job workers."
  value       = { min = module.worker.min_capacity, max = module.worker.max_capacity }
}

output "online_scaling_bounds" {
  description = "Task count bounds of the online service."
  value       = { min = module.online.min_capacity, max = module.online.max_capacity }
}
