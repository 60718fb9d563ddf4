# PostgreSQL for durable jobs (`fnserve serve --jobs-db postgresql://...`): private subnets only,
# encrypted storage, reachable on 5432 from the fleet's tasks only, TLS enforced (rds.force_ssl
# is on by default from PostgreSQL 15). The master password is generated and rotated by RDS in
# Secrets Manager (manage_master_user_password): it never appears in state or in a variable.

resource "aws_db_subnet_group" "jobs" {
  name       = "${var.name}-jobs"
  subnet_ids = var.subnet_ids
}

resource "aws_security_group" "db" {
  name        = "${var.name}-jobs-db"
  description = "PostgreSQL for fnserve jobs: from the fleet's tasks only"
  vpc_id      = var.vpc_id
}

resource "aws_vpc_security_group_ingress_rule" "from_tasks" {
  security_group_id            = aws_security_group.db.id
  referenced_security_group_id = var.client_security_group_id
  ip_protocol                  = "tcp"
  from_port                    = 5432
  to_port                      = 5432
  description                  = "fnserve tasks"
}

resource "aws_db_instance" "jobs" {
  identifier                      = "${var.name}-jobs"
  engine                          = "postgres"
  engine_version                  = var.engine_version
  instance_class                  = var.instance_class
  allocated_storage               = var.allocated_storage_gb
  max_allocated_storage           = var.allocated_storage_gb * 4
  storage_type                    = "gp3"
  storage_encrypted               = true
  kms_key_id                      = var.kms_key_arn
  db_name                         = var.database
  username                        = var.username
  manage_master_user_password     = true
  db_subnet_group_name            = aws_db_subnet_group.jobs.name
  vpc_security_group_ids          = [aws_security_group.db.id]
  publicly_accessible             = false
  multi_az                        = var.multi_az
  backup_retention_period         = 7
  deletion_protection             = var.deletion_protection
  skip_final_snapshot             = !var.deletion_protection
  final_snapshot_identifier       = var.deletion_protection ? "${var.name}-jobs-final" : null
  auto_minor_version_upgrade      = true
  performance_insights_enabled    = true
  enabled_cloudwatch_logs_exports = ["postgresql"]
  copy_tags_to_snapshot           = true
}
