# The root module, applied against the mock AWS provider: how the pieces are wired together
# (the command line the tasks run, their secrets, scaling of both services).

mock_provider "aws" {
  source = "./tests/mocks"
}

variables {
  image           = "123456789012.dkr.ecr.us-east-1.amazonaws.com/fnserve:0.1.0-gpu"
  certificate_arn = "arn:aws:acm:us-east-1:123456789012:certificate/0a1b2c3d-4e5f-6789-abcd-ef0123456789"
}

run "gpu_fleet" {
  command = apply

  # -- the tasks run the image's `fnserve serve` entrypoint on models from S3 ------------------
  assert {
    condition     = output.model_repository_url == "s3://fnserve-models-123456789012/models"
    error_message = "the model repository is s3://BUCKET/PREFIX"
  }
  assert {
    condition     = output.online_container_definitions[0].command[0] == output.model_repository_url
    error_message = "the task serves the S3 model repository"
  }
  assert {
    condition = alltrue([
      for flag in ["--allow-empty", "--model-control-mode", "--jobs-db", "--http-port", "--grpc-port", "--metrics-port", "--shutdown-timeout"] :
      contains(output.online_container_definitions[0].command, flag)
    ])
    error_message = "the command sets poll mode, the jobs database and the three ports"
  }
  assert {
    condition     = strcontains(output.jobs_db_url, "sslmode=require") && !strcontains(output.jobs_db_url, ":password")
    error_message = "the jobs database URL requires TLS and carries no password"
  }
  assert {
    condition = (
      join(",", [for p in output.online_container_definitions[0].portMappings : p.containerPort]) == "8000,8001,8002"
    )
    error_message = "the container maps HTTP 8000, gRPC 8001, metrics 8002"
  }
  assert {
    condition = (
      join(",", sort([for s in output.online_container_definitions[0].secrets : s.name])) == "FNSERVE_ADMIN_TOKEN,FNSERVE_API_TOKEN,PGPASSWORD"
    )
    error_message = "tokens and the database password come from Secrets Manager as container secrets"
  }
  assert {
    condition     = jsonencode(output.online_container_definitions[0].resourceRequirements) == jsonencode([{ type = "GPU", value = "1" }])
    error_message = "each GPU task reserves one GPU"
  }
  assert {
    condition     = output.online_container_definitions[0].stopTimeout == 120
    error_message = "ECS waits the longest it can (120 s) between SIGTERM and SIGKILL: fnserve drains meanwhile"
  }
  assert {
    condition     = output.online_container_definitions[1].name == "cloudwatch-agent" && !output.online_container_definitions[1].essential
    error_message = "the online task carries the non-essential CloudWatch agent sidecar that publishes the backlog"
  }
  assert {
    condition     = strcontains(output.online_container_definitions[1].environment[0].value, "fnserve_jobs_queue_depth")
    error_message = "the sidecar publishes fnserve_jobs_queue_depth"
  }

  # -- online scaling ---------------------------------------------------------------------------
  assert {
    condition     = output.online_scaling_bounds.min == 1 && output.online_scaling_bounds.max == 8
    error_message = "the online service scales between 1 and 8 tasks by default"
  }
  assert {
    condition = alltrue([
      for p in [aws_appautoscaling_policy.online_http_requests, aws_appautoscaling_policy.online_grpc_requests] :
      p.target_tracking_scaling_policy_configuration[0].predefined_metric_specification[0].predefined_metric_type == "ALBRequestCountPerTarget"
    ])
    error_message = "the online service tracks ALBRequestCountPerTarget on both target groups"
  }
  assert {
    condition     = aws_appautoscaling_policy.online_http_requests.target_tracking_scaling_policy_configuration[0].target_value == 30000
    error_message = "the default target is 30,000 requests per task per minute"
  }

  # -- job workers scale from zero on the backlog and back ----------------------------------
  assert {
    condition     = output.worker_scaling_bounds.min == 0 && output.worker_scaling_bounds.max == 4
    error_message = "job workers scale between 0 and worker_max"
  }
  assert {
    condition = (
      aws_cloudwatch_metric_alarm.backlog_present.metric_name == "fnserve_jobs_queue_depth" &&
      aws_cloudwatch_metric_alarm.backlog_present.comparison_operator == "GreaterThanThreshold" &&
      aws_cloudwatch_metric_alarm.backlog_present.threshold == 0 &&
      aws_cloudwatch_metric_alarm.backlog_present.statistic == "Maximum"
    )
    error_message = "any queued job raises the backlog alarm (Maximum over replicas: each reports the shared queue)"
  }
  assert {
    condition = (
      aws_appautoscaling_policy.worker_scale_out.step_scaling_policy_configuration[0].adjustment_type == "ChangeInCapacity" &&
      aws_appautoscaling_policy.worker_scale_out.step_scaling_policy_configuration[0].cooldown == 240 &&
      alltrue([for s in aws_appautoscaling_policy.worker_scale_out.step_scaling_policy_configuration[0].step_adjustment : s.scaling_adjustment > 0]) &&
      join(",", sort([for s in aws_appautoscaling_policy.worker_scale_out.step_scaling_policy_configuration[0].step_adjustment : tostring(s.scaling_adjustment)])) == "1,2,3,4"
    )
    error_message = "the backlog only adds workers (1..worker_max, one per jobs_per_worker queued), once per cooldown"
  }
  assert {
    condition = (
      aws_cloudwatch_metric_alarm.backlog_empty.comparison_operator == "LessThanOrEqualToThreshold" &&
      aws_cloudwatch_metric_alarm.backlog_empty.evaluation_periods == 10 &&
      one(aws_appautoscaling_policy.worker_scale_in.step_scaling_policy_configuration[0].step_adjustment).scaling_adjustment == 0
    )
    error_message = "ten empty minutes set the workers back to exactly zero"
  }
  assert {
    condition     = aws_cloudwatch_metric_alarm.queue_too_old.metric_name == "fnserve_jobs_oldest_queued_age_seconds" && aws_cloudwatch_metric_alarm.queue_too_old.threshold == 300
    error_message = "an old queued job adds a worker"
  }
  assert {
    condition     = output.http_url == "https://fnserve-123456.us-east-1.elb.amazonaws.com" && output.grpc_endpoint == "fnserve-123456.us-east-1.elb.amazonaws.com:443"
    error_message = "HTTP and gRPC share the TLS listener on 443"
  }
}

run "fargate_fleet" {
  command = apply
  variables {
    compute    = "fargate"
    worker_max = 2
  }
  assert {
    condition     = output.online_container_definitions[0].resourceRequirements == null
    error_message = "Fargate tasks reserve no GPU"
  }
  assert {
    condition     = module.cluster.autoscaling_group_name == null && module.cluster.capacity_provider == "FARGATE"
    error_message = "Fargate needs no Auto Scaling group"
  }
  assert {
    condition     = length(aws_appautoscaling_policy.worker_scale_out.step_scaling_policy_configuration[0].step_adjustment) == 2
    error_message = "one backlog step per possible worker"
  }
}

run "rejects_a_bad_certificate_arn" {
  command = plan
  variables {
    certificate_arn = "my-cert"
  }
  expect_failures = [var.certificate_arn]
}

run "rejects_an_image_without_tag" {
  command = plan
  variables {
    image = "fnserve"
  }
  expect_failures = [var.image]
}

run "rejects_a_scale_to_zero_online_service" {
  command = plan
  variables {
    online_min = 0
  }
  expect_failures = [var.online_min]
}

run "rejects_a_drain_longer_than_ecs_allows" {
  command = plan
  variables {
    shutdown_timeout_s = 300
  }
  expect_failures = [var.shutdown_timeout_s]
}
