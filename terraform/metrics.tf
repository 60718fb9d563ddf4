# How the job backlog reaches CloudWatch, so the worker service can scale from zero.
#
# fnserve exports `fnserve_jobs_queue_depth{model}` and the oldest queued job's age as
# Prometheus gauges on its metrics port (8002). Every online task runs a CloudWatch agent
# sidecar that scrapes localhost:8002 every 15 s and writes the two gauges as CloudWatch
# embedded metric format (EMF) log events into one log group; CloudWatch Logs turns those into
# the metrics NAMESPACE/fnserve_jobs_queue_depth and NAMESPACE/<age metric> with the single
# dimension Service=<name>-online. No server code is involved, and the metrics exist while the
# workers are at zero, because the online service (min 1 task) publishes them.
#
# The jobs live in one shared PostgreSQL database, so every online replica reports the same
# backlog: the alarms read the Maximum over replicas (a Sum would count it once per replica).
# The per-model label is dropped by the dimension set, so a datapoint is one model's backlog
# and the Maximum is the deepest model queue: workers serve every model, and scaling to the
# deepest queue is what keeps the oldest job young. If the jobs subsystem exports a total
# (an unlabelled series), point backlog_metric_name at it.

locals {
  metrics_service = "${var.name}-online"

  prometheus_config = yamlencode({
    global = { scrape_interval = "15s", scrape_timeout = "10s" }
    scrape_configs = [{
      job_name = "fnserve"
      static_configs = [{
        targets = ["localhost:${local.ports.metrics}"]
        labels  = { Service = local.metrics_service }
      }]
    }]
  })

  cloudwatch_agent_config = jsonencode({
    agent = { region = var.region }
    logs = {
      force_flush_interval = 5
      metrics_collected = {
        prometheus = {
          log_group_name         = aws_cloudwatch_log_group.metrics.name
          prometheus_config_path = "env:PROMETHEUS_CONFIG_CONTENT"
          emf_processor = {
            metric_declaration_dedup = true
            metric_namespace         = var.metrics_namespace
            metric_declaration = [{
              source_labels    = ["job"]
              label_matcher    = "^fnserve$"
              dimensions       = [["Service"]]
              metric_selectors = ["^${var.backlog_metric_name}$", "^${var.queue_age_metric_name}$"]
            }]
          }
        }
      }
    }
  })

  metrics_sidecar = {
    name      = "cloudwatch-agent"
    image     = var.cloudwatch_agent_image
    essential = false # fnserve keeps serving if the agent dies; the alarms then see no data
    environment = [
      { name = "CW_CONFIG_CONTENT", value = local.cloudwatch_agent_config },
      { name = "PROMETHEUS_CONFIG_CONTENT", value = local.prometheus_config },
    ]
    logConfiguration = {
      logDriver = "awslogs"
      options = {
        awslogs-group         = aws_cloudwatch_log_group.metrics.name
        awslogs-region        = var.region
        awslogs-stream-prefix = "agent"
      }
    }
  }
}
