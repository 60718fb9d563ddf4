# fnserve on AWS: an ECS fleet behind an Application Load Balancer (HTTP and gRPC on one TLS
# listener), models in S3, durable jobs in RDS PostgreSQL, tokens in Secrets Manager, logs and
# metrics in CloudWatch. The online service scales on requests per target; the job-worker
# service scales from zero on the job backlog the online tasks publish. README.md beside this
# file draws it and prices it.

data "aws_caller_identity" "current" {}

locals {
  gpu             = var.compute == "gpu"
  bucket_name     = coalesce(var.bucket_name, "${var.name}-models-${data.aws_caller_identity.current.account_id}")
  model_repo_url  = "s3://${module.storage.bucket}/${var.model_prefix}"
  task_cpu        = coalesce(var.task_cpu, local.gpu ? 3584 : 4096)
  task_memory_mib = coalesce(var.task_memory_mib, local.gpu ? 14336 : 8192)
  ports           = { http = 8000, grpc = 8001, metrics = 8002 }

  # The password is not in the URL: libpq-based clients read PGPASSWORD, which the task gets
  # from the RDS-managed secret. sslmode=require: the database only speaks TLS.
  jobs_db_url = format(
    "postgresql://%s@%s:%d/%s?sslmode=require",
    module.database.username, module.database.address, module.database.port, module.database.database,
  )

  # Both services run the image's entrypoint (`fnserve serve --host 0.0.0.0 ...`) with these
  # arguments: the same CLI as on a laptop. --allow-empty: a fresh bucket holds no model yet;
  # the tasks start anyway and poll mode loads what is uploaded later.
  serve_args = concat(
    [
      local.model_repo_url,
      "--allow-empty",
      "--model-control-mode", "poll",
      "--repository-poll-secs", tostring(var.repository_poll_s),
      "--http-port", tostring(local.ports.http),
      "--grpc-port", tostring(local.ports.grpc),
      "--metrics-port", tostring(local.ports.metrics),
      "--shutdown-timeout", tostring(var.shutdown_timeout_s),
      "--jobs-db", local.jobs_db_url,
    ],
    var.extra_serve_args,
  )

  task_secrets = {
    FNSERVE_ADMIN_TOKEN = module.secrets.admin_token_arn
    FNSERVE_API_TOKEN   = module.secrets.api_token_arn
    PGPASSWORD          = "${module.database.master_secret_arn}:password::"
  }
  task_environment = {
    AWS_REGION         = var.region
    AWS_DEFAULT_REGION = var.region
  }
}

module "network" {
  source                      = "./modules/network"
  name                        = var.name
  cidr                        = var.vpc_cidr
  az_count                    = var.az_count
  nat_gateway_per_az          = var.nat_gateway_per_az
  existing_vpc_id             = var.existing_vpc_id
  existing_public_subnet_ids  = var.existing_public_subnet_ids
  existing_private_subnet_ids = var.existing_private_subnet_ids
}

module "storage" {
  source        = "./modules/storage"
  bucket_name   = local.bucket_name
  force_destroy = !var.deletion_protection
}

module "secrets" {
  source               = "./modules/secrets"
  name                 = var.name
  recovery_window_days = var.deletion_protection ? 7 : 0
}

# The tasks' security group: reachable from the load balancer on the HTTP and gRPC ports only
# (the metrics port is read by the sidecar inside the task, over localhost).
resource "aws_security_group" "tasks" {
  name        = "${var.name}-tasks"
  description = "fnserve tasks: HTTP and gRPC from the load balancer"
  vpc_id      = module.network.vpc_id
}

resource "aws_vpc_security_group_ingress_rule" "tasks_from_alb" {
  for_each                     = { http = local.ports.http, grpc = local.ports.grpc }
  security_group_id            = aws_security_group.tasks.id
  referenced_security_group_id = module.loadbalancer.security_group_id
  ip_protocol                  = "tcp"
  from_port                    = each.value
  to_port                      = each.value
  description                  = "fnserve ${each.key} from the load balancer"
}

resource "aws_vpc_security_group_egress_rule" "tasks_all" {
  security_group_id = aws_security_group.tasks.id
  ip_protocol       = "-1"
  cidr_ipv4         = "0.0.0.0/0"
  description       = "S3, ECR, Secrets Manager, CloudWatch, the database"
}

module "database" {
  source                   = "./modules/database"
  name                     = var.name
  vpc_id                   = module.network.vpc_id
  subnet_ids               = module.network.private_subnet_ids
  client_security_group_id = aws_security_group.tasks.id
  instance_class           = var.db_instance_class
  allocated_storage_gb     = var.db_allocated_storage_gb
  multi_az                 = var.db_multi_az
  deletion_protection      = var.deletion_protection
}

module "cluster" {
  source                = "./modules/cluster"
  name                  = var.name
  compute               = var.compute
  vpc_id                = module.network.vpc_id
  subnet_ids            = module.network.private_subnet_ids
  gpu_instance_type     = var.gpu_instance_type
  gpu_instances_max     = var.gpu_instances_max
  gpu_ami_ssm_parameter = var.gpu_ami_ssm_parameter
}

module "loadbalancer" {
  source                   = "./modules/loadbalancer"
  name                     = var.name
  vpc_id                   = module.network.vpc_id
  subnet_ids               = var.internal_load_balancer ? module.network.private_subnet_ids : module.network.public_subnet_ids
  internal                 = var.internal_load_balancer
  allowed_cidrs            = var.allowed_cidrs
  certificate_arn          = var.certificate_arn
  target_security_group_id = aws_security_group.tasks.id
  http_port                = local.ports.http
  grpc_port                = local.ports.grpc
  target_protocol          = var.target_protocol
  # A target leaves rotation, then SIGTERM lets its in-flight requests finish: the delay only
  # needs to cover requests the load balancer still has in flight to it.
  deregistration_delay_s = var.shutdown_timeout_s
}

resource "aws_cloudwatch_log_group" "metrics" {
  name              = "/ecs/${var.name}/metrics"
  retention_in_days = var.log_retention_days
}

module "iam" {
  source                = "./modules/iam"
  name                  = var.name
  bucket_arn            = module.storage.bucket_arn
  model_prefix          = var.model_prefix
  secret_arns           = [module.secrets.admin_token_arn, module.secrets.api_token_arn, module.database.master_secret_arn]
  metrics_log_group_arn = aws_cloudwatch_log_group.metrics.arn
}

module "online" {
  source                = "./modules/service"
  name                  = "${var.name}-online"
  region                = var.region
  cluster_arn           = module.cluster.cluster_arn
  cluster_name          = module.cluster.cluster_name
  compute               = var.compute
  capacity_provider     = module.cluster.capacity_provider
  image                 = var.image
  command               = local.serve_args
  environment           = local.task_environment
  secrets               = local.task_secrets
  sidecars              = [local.metrics_sidecar]
  cpu                   = local.task_cpu
  memory_mib            = local.task_memory_mib
  gpus                  = local.gpu ? var.gpus_per_task : 0
  http_port             = local.ports.http
  grpc_port             = local.ports.grpc
  metrics_port          = local.ports.metrics
  stop_timeout_s        = 120
  health_start_period_s = var.startup_grace_s
  execution_role_arn    = module.iam.execution_role_arn
  task_role_arn         = module.iam.online_task_role_arn
  subnet_ids            = module.network.private_subnet_ids
  security_group_ids    = [aws_security_group.tasks.id]
  target_group_arns = {
    http = module.loadbalancer.http_target_group_arn
    grpc = module.loadbalancer.grpc_target_group_arn
  }
  min_capacity       = var.online_min
  max_capacity       = var.online_max
  log_retention_days = var.log_retention_days
}

# Workers: the same image and command, no load balancer; they claim jobs from PostgreSQL
# under a lease, so one stopped mid-job (scale-in, SIGKILL) has its job claimed again later.
module "worker" {
  source                = "./modules/service"
  name                  = "${var.name}-worker"
  region                = var.region
  cluster_arn           = module.cluster.cluster_arn
  cluster_name          = module.cluster.cluster_name
  compute               = var.compute
  capacity_provider     = module.cluster.capacity_provider
  image                 = var.image
  command               = local.serve_args
  environment           = local.task_environment
  secrets               = local.task_secrets
  cpu                   = local.task_cpu
  memory_mib            = local.task_memory_mib
  gpus                  = local.gpu ? var.gpus_per_task : 0
  http_port             = local.ports.http
  grpc_port             = local.ports.grpc
  metrics_port          = local.ports.metrics
  stop_timeout_s        = 120
  health_start_period_s = var.startup_grace_s
  execution_role_arn    = module.iam.execution_role_arn
  task_role_arn         = module.iam.worker_task_role_arn
  subnet_ids            = module.network.private_subnet_ids
  security_group_ids    = [aws_security_group.tasks.id]
  min_capacity          = 0
  max_capacity          = var.worker_max
  log_retention_days    = var.log_retention_days
}
