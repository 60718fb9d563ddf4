# Autoscaling.
#
# Online service: target tracking on ALBRequestCountPerTarget, one policy per target group
# (HTTP and gRPC); ECS scales out when either is above its target and in only when both agree.
#
# Job workers, from zero: target tracking cannot leave zero (requests per task is undefined
# with no task), so step scaling on CloudWatch alarms over the backlog metric does it:
# - backlog > 0            -> add ceil(backlog / jobs_per_worker) workers (capped at worker_max),
#                             again after each cooldown while jobs stay queued. Scale-out only
#                             adds: a shrinking queue must not stop workers that are busy with
#                             the jobs it lost (running jobs are not in the queue depth);
# - oldest job too old     -> one more worker (a few slow jobs can age without a deep queue);
# - backlog 0 for N minutes -> exactly 0 workers. A job still running then is drained by SIGTERM
#                             (up to 120 s) and otherwise claimed again when its lease expires:
#                             keep worker_idle_minutes above the longest job.

resource "aws_appautoscaling_policy" "online_http_requests" {
  name               = "${var.name}-online-http-requests"
  policy_type        = "TargetTrackingScaling"
  service_namespace  = "ecs"
  resource_id        = module.online.scaling_resource_id
  scalable_dimension = module.online.scalable_dimension
  target_tracking_scaling_policy_configuration {
    target_value       = var.online_requests_per_target_per_minute
    scale_in_cooldown  = 300
    scale_out_cooldown = 60
    predefined_metric_specification {
      predefined_metric_type = "ALBRequestCountPerTarget"
      resource_label         = "${module.loadbalancer.arn_suffix}/${module.loadbalancer.http_target_group_arn_suffix}"
    }
  }
}

resource "aws_appautoscaling_policy" "online_grpc_requests" {
  name               = "${var.name}-online-grpc-requests"
  policy_type        = "TargetTrackingScaling"
  service_namespace  = "ecs"
  resource_id        = module.online.scaling_resource_id
  scalable_dimension = module.online.scalable_dimension
  target_tracking_scaling_policy_configuration {
    target_value       = var.online_requests_per_target_per_minute
    scale_in_cooldown  = 300
    scale_out_cooldown = 60
    predefined_metric_specification {
      predefined_metric_type = "ALBRequestCountPerTarget"
      resource_label         = "${module.loadbalancer.arn_suffix}/${module.loadbalancer.grpc_target_group_arn_suffix}"
    }
  }
}

locals {
  backlog_dimensions = { Service = local.metrics_service }
  # Step i (1-based) covers a backlog of ((i-1)*jobs_per_worker, i*jobs_per_worker]: i more workers.
  worker_steps = [
    for i in range(1, var.worker_max + 1) : {
      lower    = (i - 1) * var.jobs_per_worker
      upper    = i == var.worker_max ? null : i * var.jobs_per_worker
      capacity = i
    }
  ]
}

resource "aws_appautoscaling_policy" "worker_scale_out" {
  name               = "${var.name}-worker-backlog"
  policy_type        = "StepScaling"
  service_namespace  = "ecs"
  resource_id        = module.worker.scaling_resource_id
  scalable_dimension = module.worker.scalable_dimension
  step_scaling_policy_configuration {
    adjustment_type         = "ChangeInCapacity"
    cooldown                = var.worker_scale_out_cooldown_s
    metric_aggregation_type = "Maximum"
    dynamic "step_adjustment" {
      for_each = local.worker_steps
      content {
        metric_interval_lower_bound = step_adjustment.value.lower
        metric_interval_upper_bound = step_adjustment.value.upper
        scaling_adjustment          = step_adjustment.value.capacity
      }
    }
  }
}

resource "aws_cloudwatch_metric_alarm" "backlog_present" {
  alarm_name          = "${var.name}-jobs-backlog"
  alarm_description   = "Jobs are queued: start workers (from zero) in proportion to the backlog."
  namespace           = var.metrics_namespace
  metric_name         = var.backlog_metric_name
  dimensions          = local.backlog_dimensions
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_appautoscaling_policy.worker_scale_out.arn]
}

resource "aws_appautoscaling_policy" "worker_queue_age" {
  name               = "${var.name}-worker-queue-age"
  policy_type        = "StepScaling"
  service_namespace  = "ecs"
  resource_id        = module.worker.scaling_resource_id
  scalable_dimension = module.worker.scalable_dimension
  step_scaling_policy_configuration {
    adjustment_type         = "ChangeInCapacity"
    cooldown                = 180
    metric_aggregation_type = "Maximum"
    step_adjustment {
      metric_interval_lower_bound = 0
      scaling_adjustment          = 1
    }
  }
}

resource "aws_cloudwatch_metric_alarm" "queue_too_old" {
  alarm_name          = "${var.name}-jobs-oldest-queued"
  alarm_description   = "The oldest queued job waits too long: add a worker."
  namespace           = var.metrics_namespace
  metric_name         = var.queue_age_metric_name
  dimensions          = local.backlog_dimensions
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 2
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.worker_max_queue_age_s
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_appautoscaling_policy.worker_queue_age.arn]
}

resource "aws_appautoscaling_policy" "worker_scale_in" {
  name               = "${var.name}-worker-idle"
  policy_type        = "StepScaling"
  service_namespace  = "ecs"
  resource_id        = module.worker.scaling_resource_id
  scalable_dimension = module.worker.scalable_dimension
  step_scaling_policy_configuration {
    adjustment_type         = "ExactCapacity"
    cooldown                = 60
    metric_aggregation_type = "Maximum"
    step_adjustment {
      metric_interval_upper_bound = 0
      scaling_adjustment          = 0
    }
  }
}

# Missing data counts as "no backlog": with no datapoints there is no evidence of work, and
# workers left running on a silent metric would cost GPU hours for nothing.
resource "aws_cloudwatch_metric_alarm" "backlog_empty" {
  alarm_name          = "${var.name}-jobs-backlog-empty"
  alarm_description   = "No job queued for a while: scale the workers back to zero."
  namespace           = var.metrics_namespace
  metric_name         = var.backlog_metric_name
  dimensions          = local.backlog_dimensions
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = var.worker_idle_minutes
  datapoints_to_alarm = var.worker_idle_minutes
  comparison_operator = "LessThanOrEqualToThreshold"
  threshold           = 0
  treat_missing_data  = "breaching"
  alarm_actions       = [aws_appautoscaling_policy.worker_scale_in.arn]
}
