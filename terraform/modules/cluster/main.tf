# The ECS cluster and its capacity: GPU instances in an Auto Scaling group that ECS scales
# itself (a capacity provider with managed scaling: instances follow the tasks that need them,
# down to zero), or Fargate for CPU-only fleets. The GPU instances boot the ECS GPU-optimized
# AMI (NVIDIA driver, container toolkit, ECS agent), found through its public SSM parameter,
# so every new instance gets the current image.

locals {
  gpu = var.compute == "gpu"
}

resource "aws_ecs_cluster" "this" {
  name = var.name
  setting {
    name  = "containerInsights"
    value = "enabled"
  }
}

resource "aws_ecs_cluster_capacity_providers" "this" {
  cluster_name       = aws_ecs_cluster.this.name
  capacity_providers = local.gpu ? [aws_ecs_capacity_provider.gpu[0].name] : ["FARGATE", "FARGATE_SPOT"]
  default_capacity_provider_strategy {
    capacity_provider = local.gpu ? aws_ecs_capacity_provider.gpu[0].name : "FARGATE"
    weight            = 1
  }
}

data "aws_ssm_parameter" "gpu_ami" {
  count = local.gpu ? 1 : 0
  name  = var.gpu_ami_ssm_parameter
}

resource "aws_iam_role" "instance" {
  count = local.gpu ? 1 : 0
  name  = "${var.name}-ecs-instance"
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "ec2.amazonaws.com" }
      Action    = "sts:AssumeRole"
    }]
  })
}

resource "aws_iam_role_policy_attachment" "instance_ecs" {
  count      = local.gpu ? 1 : 0
  role       = aws_iam_role.instance[0].name
  policy_arn = "arn:aws:iam::aws:policy/service-role/AmazonEC2ContainerServiceforEC2Role"
}

resource "aws_iam_role_policy_attachment" "instance_ssm" {
  count      = local.gpu ? 1 : 0
  role       = aws_iam_role.instance[0].name
  policy_arn = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
}

resource "aws_iam_instance_profile" "instance" {
  count = local.gpu ? 1 : 0
  name  = "${var.name}-ecs-instance"
  role  = aws_iam_role.instance[0].name
}

# Instances take no inbound traffic: tasks use awsvpc networking, each with its own ENI and
# security group.
resource "aws_security_group" "instance" {
  count       = local.gpu ? 1 : 0
  name        = "${var.name}-ecs-instance"
  description = "GPU container instances: outbound only"
  vpc_id      = var.vpc_id
}

resource "aws_vpc_security_group_egress_rule" "instance_all" {
  count             = local.gpu ? 1 : 0
  security_group_id = aws_security_group.instance[0].id
  ip_protocol       = "-1"
  cidr_ipv4         = "0.0.0.0/0"
  description       = "ECR, ECS, S3, CloudWatch"
}

resource "aws_launch_template" "gpu" {
  count                  = local.gpu ? 1 : 0
  name_prefix            = "${var.name}-gpu-"
  image_id               = data.aws_ssm_parameter.gpu_ami[0].value
  instance_type          = var.gpu_instance_type
  vpc_security_group_ids = [aws_security_group.instance[0].id]
  iam_instance_profile {
    arn = aws_iam_instance_profile.instance[0].arn
  }
  metadata_options {
    http_tokens                 = "required"
    http_put_response_hop_limit = 1 # containers cannot reach the instance's credentials
  }
  block_device_mappings {
    device_name = "/dev/xvda"
    ebs {
      volume_size = var.root_volume_gb
      volume_type = "gp3"
      encrypted   = true
    }
  }
  # prefer-cached: a task restarted on the same instance skips the multi-GB image pull.
  user_data = base64encode(<<-EOT
    #!/bin/bash
    cat >> /etc/ecs/ecs.config <<CONFIG
    ECS_CLUSTER=${var.name}
    ECS_ENABLE_GPU_SUPPORT=true
    ECS_AWSVPC_BLOCK_IMDS=true
    ECS_CONTAINER_STOP_TIMEOUT=120s
    ECS_IMAGE_PULL_BEHAVIOR=prefer-cached
    CONFIG
  EOT
  )
  tag_specifications {
    resource_type = "instance"
    tags          = { Name = "${var.name}-gpu" }
  }
}

resource "aws_autoscaling_group" "gpu" {
  count                 = local.gpu ? 1 : 0
  name_prefix           = "${var.name}-gpu-"
  vpc_zone_identifier   = var.subnet_ids
  min_size              = 0
  max_size              = var.gpu_instances_max
  protect_from_scale_in = true # ECS decides which instance may go (managed termination protection)
  launch_template {
    id      = aws_launch_template.gpu[0].id
    version = "$Latest"
  }
  tag {
    key                 = "AmazonECSManaged"
    value               = "true"
    propagate_at_launch = true
  }
  lifecycle {
    ignore_changes = [desired_capacity]
  }
}

resource "aws_ecs_capacity_provider" "gpu" {
  count = local.gpu ? 1 : 0
  name  = "${var.name}-gpu"
  auto_scaling_group_provider {
    auto_scaling_group_arn         = aws_autoscaling_group.gpu[0].arn
    managed_termination_protection = "ENABLED"
    managed_draining               = "ENABLED"
    managed_scaling {
      status                    = "ENABLED"
      target_capacity           = 100
      minimum_scaling_step_size = 1
      maximum_scaling_step_size = 4
      instance_warmup_period    = 180
    }
  }
}
