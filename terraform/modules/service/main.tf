# One ECS service running the fnserve image: its task definition (the `fnserve serve` command
# line, secrets, logs, GPU reservation), the service (optionally behind load balancer target
# groups) and its Application Auto Scaling target. Scaling policies are attached by the caller,
# which knows the metric to follow.

locals {
  gpu   = var.compute == "gpu"
  ports = [var.http_port, var.grpc_port, var.metrics_port]
  fnserve = {
    name         = "fnserve"
    image        = var.image
    essential    = true
    command      = var.command
    stopTimeout  = var.stop_timeout_s
    portMappings = [for port in local.ports : { containerPort = port, protocol = "tcp" }]
    environment  = [for k, v in var.environment : { name = k, value = v }]
    secrets      = [for k, v in var.secrets : { name = k, valueFrom = v }]
    ulimits      = [{ name = "nofile", softLimit = 65536, hardLimit = 65536 }]
    resourceRequirements = local.gpu && var.gpus > 0 ? [
      { type = "GPU", value = tostring(var.gpus) }
    ] : null
    healthCheck = {
      command     = ["CMD", "python", "/opt/fnserve/healthcheck.py"]
      interval    = 10
      timeout     = 5
      retries     = 3
      startPeriod = var.health_start_period_s
    }
    logConfiguration = {
      logDriver = "awslogs"
      options = {
        awslogs-group         = aws_cloudwatch_log_group.this.name
        awslogs-region        = var.region
        awslogs-stream-prefix = "fnserve"
      }
    }
  }
}

resource "aws_cloudwatch_log_group" "this" {
  name              = "/ecs/${var.name}"
  retention_in_days = var.log_retention_days
}

resource "aws_ecs_task_definition" "this" {
  family                   = var.name
  requires_compatibilities = [local.gpu ? "EC2" : "FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = tostring(var.cpu)
  memory                   = tostring(var.memory_mib)
  execution_role_arn       = var.execution_role_arn
  task_role_arn            = var.task_role_arn
  container_definitions    = jsonencode(concat([local.fnserve], var.sidecars))
  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = "X86_64"
  }
  lifecycle {
    precondition {
      condition     = local.gpu || contains([256, 512, 1024, 2048, 4096, 8192, 16384], var.cpu)
      error_message = "Fargate task CPU must be one of 256, 512, 1024, 2048, 4096, 8192, 16384 (got ${var.cpu})."
    }
  }
}

resource "aws_ecs_service" "this" {
  name                               = var.name
  cluster                            = var.cluster_arn
  task_definition                    = aws_ecs_task_definition.this.arn
  desired_count                      = var.min_capacity
  deployment_minimum_healthy_percent = 100
  deployment_maximum_percent         = 200
  health_check_grace_period_seconds  = length(var.target_group_arns) > 0 ? var.health_start_period_s : null
  enable_ecs_managed_tags            = true
  propagate_tags                     = "SERVICE"
  capacity_provider_strategy {
    capacity_provider = var.capacity_provider
    weight            = 1
  }
  network_configuration {
    subnets          = var.subnet_ids
    security_groups  = var.security_group_ids
    assign_public_ip = false
  }
  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }
  dynamic "load_balancer" {
    for_each = var.target_group_arns
    content {
      target_group_arn = load_balancer.value
      container_name   = "fnserve"
      container_port   = load_balancer.key == "grpc" ? var.grpc_port : var.http_port
    }
  }
  lifecycle {
    ignore_changes = [desired_count] # Application Auto Scaling owns it
  }
}

resource "aws_appautoscaling_target" "this" {
  service_namespace  = "ecs"
  scalable_dimension = "ecs:service:DesiredCount"
  resource_id        = "service/${var.cluster_name}/${aws_ecs_service.this.name}"
  min_capacity       = var.min_capacity
  max_capacity       = var.max_capacity
}
