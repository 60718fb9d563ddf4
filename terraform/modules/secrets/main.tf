# The admin and API bearer tokens (`FNSERVE_ADMIN_TOKEN`, `FNSERVE_API_TOKEN`) in Secrets
# Manager. Their first values are random (Secrets Manager's own generator, so no extra provider);
# after that terraform leaves the values alone: rotate them with `aws secretsmanager
# put-secret-value` and roll the services (tasks read secrets when they start).

locals {
  tokens = toset(["admin", "api"])
}

data "aws_secretsmanager_random_password" "token" {
  for_each            = local.tokens
  password_length     = 48
  exclude_punctuation = true
}

resource "aws_secretsmanager_secret" "token" {
  for_each                = local.tokens
  name                    = "${var.name}/${each.key}-token"
  description             = "fnserve ${each.key} bearer token (FNSERVE_${upper(each.key)}_TOKEN)"
  kms_key_id              = var.kms_key_arn
  recovery_window_in_days = var.recovery_window_days
}

resource "aws_secretsmanager_secret_version" "token" {
  for_each      = local.tokens
  secret_id     = aws_secretsmanager_secret.token[each.key].id
  secret_string = data.aws_secretsmanager_random_password.token[each.key].random_password
  lifecycle {
    ignore_changes = [secret_string]
  }
}
