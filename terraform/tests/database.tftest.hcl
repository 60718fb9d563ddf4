# modules/database: the jobs database is private, encrypted, and open to the tasks only.

mock_provider "aws" {
  source = "./tests/mocks"
}

run "postgres" {
  command = apply
  module {
    source = "./modules/database"
  }
  variables {
    name                     = "fnserve"
    vpc_id                   = "vpc-0123456789abcdef0"
    subnet_ids               = ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]
    client_security_group_id = "sg-0fedcba9876543210"
    instance_class           = "db.t4g.small"
    allocated_storage_gb     = 20
    multi_az                 = false
    deletion_protection      = true
  }

  assert {
    condition     = aws_db_instance.jobs.engine == "postgres" && aws_db_instance.jobs.storage_encrypted
    error_message = "PostgreSQL with encrypted storage"
  }
  assert {
    condition     = !aws_db_instance.jobs.publicly_accessible
    error_message = "the database has no public address"
  }
  assert {
    condition     = aws_db_instance.jobs.manage_master_user_password && aws_db_instance.jobs.password == null
    error_message = "RDS keeps the password in Secrets Manager; none is in the configuration or state"
  }
  assert {
    condition = (
      aws_vpc_security_group_ingress_rule.from_tasks.from_port == 5432 &&
      aws_vpc_security_group_ingress_rule.from_tasks.to_port == 5432 &&
      aws_vpc_security_group_ingress_rule.from_tasks.referenced_security_group_id == "sg-0fedcba9876543210" &&
      aws_vpc_security_group_ingress_rule.from_tasks.cidr_ipv4 == null
    )
    error_message = "port 5432 is open to the tasks' security group only"
  }
  assert {
    condition     = aws_db_instance.jobs.deletion_protection && !aws_db_instance.jobs.skip_final_snapshot
    error_message = "a protected database keeps a final snapshot"
  }
}
