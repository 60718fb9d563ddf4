# modules/cluster and modules/network: GPU capacity from the ECS GPU AMI, scaling from zero
# instances; an existing VPC creates no network.

mock_provider "aws" {
  source = "./tests/mocks"
}

run "gpu_capacity" {
  command = apply
  module {
    source = "./modules/cluster"
  }
  variables {
    name                  = "fnserve"
    compute               = "gpu"
    vpc_id                = "vpc-0123456789abcdef0"
    subnet_ids            = ["subnet-0123456789abcdef0"]
    gpu_instance_type     = "g6.xlarge"
    gpu_instances_max     = 6
    gpu_ami_ssm_parameter = "/aws/service/ecs/optimized-ami/amazon-linux-2023/gpu/recommended/image_id"
  }

  assert {
    condition = (
      data.aws_ssm_parameter.gpu_ami[0].name == var.gpu_ami_ssm_parameter &&
      aws_launch_template.gpu[0].image_id == data.aws_ssm_parameter.gpu_ami[0].value
    )
    error_message = "instances boot the ECS GPU-optimized AMI named by its SSM parameter"
  }
  assert {
    condition     = aws_launch_template.gpu[0].instance_type == "g6.xlarge"
    error_message = "the instance type is the variable's"
  }
  assert {
    condition     = aws_autoscaling_group.gpu[0].min_size == 0 && aws_autoscaling_group.gpu[0].max_size == 6
    error_message = "the GPU Auto Scaling group runs between 0 and gpu_instances_max instances"
  }
  assert {
    condition = (
      aws_ecs_capacity_provider.gpu[0].auto_scaling_group_provider[0].managed_scaling[0].status == "ENABLED" &&
      aws_ecs_capacity_provider.gpu[0].auto_scaling_group_provider[0].managed_termination_protection == "ENABLED"
    )
    error_message = "ECS scales the instances to the tasks and never terminates one running a task"
  }
  assert {
    condition     = strcontains(base64decode(aws_launch_template.gpu[0].user_data), "ECS_ENABLE_GPU_SUPPORT=true")
    error_message = "the ECS agent exposes the GPUs"
  }
  assert {
    condition = (
      aws_launch_template.gpu[0].metadata_options[0].http_tokens == "required" &&
      aws_launch_template.gpu[0].block_device_mappings[0].ebs[0].encrypted == "true"
    )
    error_message = "IMDSv2 only, encrypted root volume"
  }
}

run "fargate_capacity" {
  command = apply
  module {
    source = "./modules/cluster"
  }
  variables {
    name                  = "fnserve"
    compute               = "fargate"
    vpc_id                = "vpc-0123456789abcdef0"
    subnet_ids            = ["subnet-0123456789abcdef0"]
    gpu_instance_type     = "g5.xlarge"
    gpu_instances_max     = 1
    gpu_ami_ssm_parameter = "/aws/service/ecs/optimized-ami/amazon-linux-2023/gpu/recommended/image_id"
  }
  assert {
    condition     = length(aws_autoscaling_group.gpu) == 0 && contains(aws_ecs_cluster_capacity_providers.this.capacity_providers, "FARGATE")
    error_message = "the CPU option runs on Fargate with no instances to manage"
  }
}

run "existing_vpc" {
  command = apply
  module {
    source = "./modules/network"
  }
  variables {
    name                        = "fnserve"
    cidr                        = "10.40.0.0/16"
    az_count                    = 2
    existing_vpc_id             = "vpc-0aaaaaaaaaaaaaaaa"
    existing_public_subnet_ids  = ["subnet-0aaaaaaaaaaaaaaa1", "subnet-0aaaaaaaaaaaaaaa2"]
    existing_private_subnet_ids = ["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"]
  }
  assert {
    condition     = length(aws_vpc.this) == 0 && length(aws_nat_gateway.this) == 0 && output.vpc_id == "vpc-0aaaaaaaaaaaaaaaa"
    error_message = "an existing VPC is used as given: nothing is created"
  }
  assert {
    condition     = output.private_subnet_ids == var.existing_private_subnet_ids
    error_message = "tasks go into the given private subnets"
  }
}

run "new_vpc" {
  command = apply
  module {
    source = "./modules/network"
  }
  variables {
    name     = "fnserve"
    cidr     = "10.40.0.0/16"
    az_count = 3
  }
  assert {
    condition     = length(aws_subnet.private) == 3 && length(aws_subnet.public) == 3 && length(aws_nat_gateway.this) == 1
    error_message = "a new VPC spans az_count AZs with one shared NAT gateway by default"
  }
  assert {
    condition     = aws_vpc_endpoint.s3[0].vpc_endpoint_type == "Gateway" && aws_vpc_endpoint.s3[0].service_name == "com.amazonaws.us-east-1.s3"
    error_message = "model downloads from S3 bypass the NAT gateway"
  }
}
