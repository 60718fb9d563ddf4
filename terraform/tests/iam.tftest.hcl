# modules/iam: the task roles read the model prefix of the bucket and nothing else.

mock_provider "aws" {
  source = "./tests/mocks"
}

variables {
  name                  = "fnserve"
  bucket_arn            = "arn:aws:s3:::fnserve-models-123456789012"
  model_prefix          = "prod/models"
  secret_arns           = ["arn:aws:secretsmanager:us-east-1:123456789012:secret:fnserve/admin-token-AbCdEf"]
  metrics_log_group_arn = "arn:aws:logs:us-east-1:123456789012:log-group:/ecs/fnserve/metrics"
}

run "roles" {
  command = apply
  module {
    source = "./modules/iam"
  }

  assert {
    condition = (
      length(jsondecode(aws_iam_role_policy.worker_models.policy).Statement) == 2 &&
      toset(flatten([for s in jsondecode(aws_iam_role_policy.worker_models.policy).Statement : s.Action])) == toset(["s3:ListBucket", "s3:GetObject", "s3:GetObjectVersion"])
    )
    error_message = "the worker may only list and read (no write, no delete, no other service)"
  }
  assert {
    condition = (
      jsondecode(aws_iam_role_policy.worker_models.policy).Statement[1].Resource == "arn:aws:s3:::fnserve-models-123456789012/prod/models/*"
    )
    error_message = "objects are readable under the model prefix only"
  }
  assert {
    condition = (
      jsondecode(aws_iam_role_policy.worker_models.policy).Statement[0].Resource == var.bucket_arn &&
      jsondecode(aws_iam_role_policy.worker_models.policy).Statement[0].Condition.StringLike["s3:prefix"] == ["prod/models", "prod/models/*"]
    )
    error_message = "listing is limited to the model prefix"
  }
  assert {
    condition = alltrue([
      for s in concat(
        jsondecode(aws_iam_role_policy.worker_models.policy).Statement,
        jsondecode(aws_iam_role_policy.online_models.policy).Statement,
        jsondecode(aws_iam_role_policy.online_metrics.policy).Statement,
        jsondecode(aws_iam_role_policy.execution_secrets.policy).Statement,
      ) : s.Effect == "Allow" && !contains(flatten([s.Resource]), "*") && !contains(flatten([s.Action]), "*")
    ])
    error_message = "no statement grants every action or every resource"
  }
  assert {
    condition     = aws_iam_role_policy.online_models.policy == aws_iam_role_policy.worker_models.policy
    error_message = "the online role reads models exactly like the worker role"
  }
  assert {
    condition = (
      jsondecode(aws_iam_role_policy.online_metrics.policy).Statement[0].Resource == ["${var.metrics_log_group_arn}:*"] &&
      alltrue([for a in jsondecode(aws_iam_role_policy.online_metrics.policy).Statement[0].Action : startswith(a, "logs:")])
    )
    error_message = "the online role's only other right: writing metric logs to its one log group"
  }
  assert {
    condition = (
      jsondecode(aws_iam_role_policy.execution_secrets.policy).Statement[0].Action == "secretsmanager:GetSecretValue" &&
      jsonencode(jsondecode(aws_iam_role_policy.execution_secrets.policy).Statement[0].Resource) == jsonencode(var.secret_arns)
    )
    error_message = "the execution role reads exactly the injected secrets"
  }
  assert {
    condition     = jsondecode(aws_iam_role.worker.assume_role_policy).Statement[0].Principal.Service == "ecs-tasks.amazonaws.com"
    error_message = "task roles are assumable by ECS tasks only"
  }
}
