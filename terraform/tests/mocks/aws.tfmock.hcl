# Values the mock AWS provider returns where the provider validates their shape (ARNs) or the
# configuration indexes into them. Everything else gets the mock's generated values.

mock_data "aws_availability_zones" {
  defaults = { names = ["us-east-1a", "us-east-1b", "us-east-1c"] }
}

mock_data "aws_caller_identity" {
  defaults = { account_id = "123456789012" }
}

mock_data "aws_region" {
  defaults = { name = "us-east-1" }
}

mock_data "aws_ssm_parameter" {
  defaults = { value = "ami-0123456789abcdef0" }
}

mock_resource "aws_lb" {
  defaults = {
    arn        = "arn:aws:elasticloadbalancing:us-east-1:123456789012:loadbalancer/app/fnserve/0123456789abcdef"
    arn_suffix = "app/fnserve/0123456789abcdef"
    dns_name   = "fnserve-123456.us-east-1.elb.amazonaws.com"
  }
}

mock_resource "aws_lb_target_group" {
  defaults = {
    arn        = "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/fnserve/0123456789abcdef"
    arn_suffix = "targetgroup/fnserve/0123456789abcdef"
  }
}

mock_resource "aws_lb_listener" {
  defaults = {
    arn = "arn:aws:elasticloadbalancing:us-east-1:123456789012:listener/app/fnserve/0123456789abcdef/0123456789abcdef"
  }
}

mock_resource "aws_iam_instance_profile" {
  defaults = { arn = "arn:aws:iam::123456789012:instance-profile/fnserve-ecs-instance" }
}

mock_resource "aws_iam_role" {
  defaults = { arn = "arn:aws:iam::123456789012:role/fnserve-role" }
}

mock_resource "aws_autoscaling_group" {
  defaults = { arn = "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:0123:autoScalingGroupName/fnserve-gpu" }
}

mock_resource "aws_ecs_cluster" {
  defaults = { arn = "arn:aws:ecs:us-east-1:123456789012:cluster/fnserve" }
}

mock_resource "aws_ecs_task_definition" {
  defaults = { arn = "arn:aws:ecs:us-east-1:123456789012:task-definition/fnserve:1" }
}

mock_resource "aws_secretsmanager_secret" {
  defaults = { arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:fnserve/token-AbCdEf" }
}

mock_resource "aws_s3_bucket" {
  defaults = { arn = "arn:aws:s3:::fnserve-models-123456789012" }
}

mock_resource "aws_cloudwatch_log_group" {
  defaults = { arn = "arn:aws:logs:us-east-1:123456789012:log-group:/ecs/fnserve/metrics" }
}

mock_resource "aws_appautoscaling_policy" {
  defaults = { arn = "arn:aws:autoscaling:us-east-1:123456789012:scalingPolicy:0123:resource/ecs/service/fnserve/fnserve-worker:policyName/fnserve" }
}

mock_resource "aws_db_instance" {
  defaults = {
    address  = "fnserve-jobs.abcdefghijkl.us-east-1.rds.amazonaws.com"
    port     = 5432
    endpoint = "fnserve-jobs.abcdefghijkl.us-east-1.rds.amazonaws.com:5432"
    master_user_secret = [{
      kms_key_id    = "arn:aws:kms:us-east-1:123456789012:key/0123"
      secret_arn    = "arn:aws:secretsmanager:us-east-1:123456789012:secret:rds!db-0123-AbCdEf"
      secret_status = "active"
    }]
  }
}

mock_resource "aws_launch_template" {
  defaults = { id = "lt-0123456789abcdef0" }
}

mock_resource "aws_security_group" {
  defaults = { id = "sg-0123456789abcdef0" }
}

mock_resource "aws_vpc" {
  defaults = { id = "vpc-0123456789abcdef0" }
}

mock_resource "aws_subnet" {
  defaults = { id = "subnet-0123456789abcdef0" }
}
