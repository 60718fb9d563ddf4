# Least privilege, role by role:
# - execution role (the ECS agent): pull the image, write the container logs, read exactly the
#   secrets the task definitions name;
# - worker task role (fnserve itself): list and read the model prefix of the bucket, nothing else;
# - online task role: the same, plus writing the backlog metrics (embedded metric format) into
#   one log group, which is what its CloudWatch agent sidecar does.

locals {
  ecs_tasks_trust = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "ecs-tasks.amazonaws.com" }
      Action    = "sts:AssumeRole"
    }]
  })
  # Read the model repository: list under the prefix, get (any version of) its objects.
  model_read_statements = [
    {
      Sid       = "ListModelPrefix"
      Effect    = "Allow"
      Action    = "s3:ListBucket"
      Resource  = var.bucket_arn
      Condition = { StringLike = { "s3:prefix" = [var.model_prefix, "${var.model_prefix}/*"] } }
    },
    {
      Sid      = "ReadModelObjects"
      Effect   = "Allow"
      Action   = ["s3:GetObject", "s3:GetObjectVersion"]
      Resource = "${var.bucket_arn}/${var.model_prefix}/*"
    },
  ]
}

resource "aws_iam_role" "execution" {
  name               = "${var.name}-task-execution"
  assume_role_policy = local.ecs_tasks_trust
}

resource "aws_iam_role_policy_attachment" "execution" {
  role       = aws_iam_role.execution.name
  policy_arn = "arn:aws:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy"
}

resource "aws_iam_role_policy" "execution_secrets" {
  name = "read-task-secrets"
  role = aws_iam_role.execution.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid      = "ReadTaskSecrets"
      Effect   = "Allow"
      Action   = "secretsmanager:GetSecretValue"
      Resource = var.secret_arns
    }]
  })
}

resource "aws_iam_role" "worker" {
  name               = "${var.name}-worker-task"
  assume_role_policy = local.ecs_tasks_trust
}

resource "aws_iam_role_policy" "worker_models" {
  name   = "read-model-prefix"
  role   = aws_iam_role.worker.id
  policy = jsonencode({ Version = "2012-10-17", Statement = local.model_read_statements })
}

resource "aws_iam_role" "online" {
  name               = "${var.name}-online-task"
  assume_role_policy = local.ecs_tasks_trust
}

resource "aws_iam_role_policy" "online_models" {
  name   = "read-model-prefix"
  role   = aws_iam_role.online.id
  policy = jsonencode({ Version = "2012-10-17", Statement = local.model_read_statements })
}

resource "aws_iam_role_policy" "online_metrics" {
  name = "write-backlog-metrics"
  role = aws_iam_role.online.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid      = "WriteEmbeddedMetricLogs"
      Effect   = "Allow"
      Action   = ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"]
      Resource = ["${var.metrics_log_group_arn}:*"]
    }]
  })
}
