# -- identity and placement ---------------------------------------------------------------------

variable "name" {
  description = "Name of this fleet: the prefix of every resource (lower case, 3-20 characters)."
  type        = string
  default     = "fnserve"
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{2,19}$", var.name))
    error_message = "name: 3-20 characters, lower-case letters, digits and '-', starting with a letter."
  }
}

variable "region" {
  description = "AWS region to deploy to."
  type        = string
  default     = "us-east-1"
  validation {
    condition     = can(regex("^[a-z]{2}(-gov)?-[a-z]+-[0-9]$", var.region))
    error_message = "region: an AWS region name such as us-east-1."
  }
}

variable "tags" {
  description = "Extra tags on every resource."
  type        = map(string)
  default     = {}
}

# -- network ------------------------------------------------------------------------------------

variable "vpc_cidr" {
  description = "CIDR block of the VPC created when existing_vpc_id is null."
  type        = string
  default     = "10.40.0.0/16"
  validation {
    condition     = can(cidrnetmask(var.vpc_cidr)) && tonumber(split("/", var.vpc_cidr)[1]) <= 20
    error_message = "vpc_cidr: an IPv4 CIDR block of /20 or larger (it is cut into /24-or-larger subnets)."
  }
}

variable "az_count" {
  description = "Availability zones of a created VPC (2 or 3; RDS and the ALB need 2)."
  type        = number
  default     = 2
  validation {
    condition     = contains([2, 3], var.az_count)
    error_message = "az_count: 2 or 3."
  }
}

variable "nat_gateway_per_az" {
  description = "A NAT gateway in every AZ of a created VPC (true) or one shared (false, cheaper)."
  type        = bool
  default     = false
}

variable "existing_vpc_id" {
  description = "Deploy into this VPC instead of creating one (then give its subnets too)."
  type        = string
  default     = null
  validation {
    condition     = var.existing_vpc_id == null || can(regex("^vpc-[0-9a-f]{8,17}$", var.existing_vpc_id))
    error_message = "existing_vpc_id: a VPC id such as vpc-0123456789abcdef0, or null."
  }
}

variable "existing_public_subnet_ids" {
  description = "Public subnets (two AZs or more) of existing_vpc_id, for the load balancer."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for s in var.existing_public_subnet_ids : can(regex("^subnet-[0-9a-f]{8,17}$", s))])
    error_message = "existing_public_subnet_ids: subnet ids such as subnet-0123456789abcdef0."
  }
}

variable "existing_private_subnet_ids" {
  description = "Private subnets (two AZs or more, with a NAT or VPC endpoints) of existing_vpc_id, for tasks, GPU instances and the database."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for s in var.existing_private_subnet_ids : can(regex("^subnet-[0-9a-f]{8,17}$", s))])
    error_message = "existing_private_subnet_ids: subnet ids such as subnet-0123456789abcdef0."
  }
}

variable "allowed_cidrs" {
  description = "Networks allowed to reach the load balancer (443, and 80 which redirects)."
  type        = list(string)
  default     = ["0.0.0.0/0"]
  validation {
    condition     = length(var.allowed_cidrs) > 0 && alltrue([for c in var.allowed_cidrs : can(cidrnetmask(c))])
    error_message = "allowed_cidrs: one IPv4 CIDR block or more."
  }
}

variable "internal_load_balancer" {
  description = "Make the load balancer internal (reachable from the VPC only)."
  type        = bool
  default     = false
}

variable "certificate_arn" {
  description = "ACM certificate (same region) of the HTTPS listener that serves HTTP and gRPC."
  type        = string
  validation {
    condition     = can(regex("^arn:aws[a-z-]*:acm:[a-z0-9-]+:[0-9]{12}:certificate/[0-9a-f-]+$", var.certificate_arn))
    error_message = "certificate_arn: an ACM certificate ARN, arn:aws:acm:REGION:ACCOUNT:certificate/ID."
  }
}

variable "target_protocol" {
  description = "Load balancer to task protocol: HTTP (plaintext inside the VPC) or HTTPS (add --tls-cert/--tls-key to extra_serve_args)."
  type        = string
  default     = "HTTP"
  validation {
    condition     = contains(["HTTP", "HTTPS"], var.target_protocol)
    error_message = "target_protocol: HTTP or HTTPS."
  }
}

# -- compute ------------------------------------------------------------------------------------

variable "image" {
  description = "fnserve container image (built from Dockerfile.gpu for compute = gpu, Dockerfile for fargate), e.g. ACCOUNT.dkr.ecr.REGION.amazonaws.com/fnserve:0.1.0-gpu."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9./_-]*(:[A-Za-z0-9._-]+|@sha256:[0-9a-f]{64})$", var.image))
    error_message = "image: a repository with a tag or digest (REPOSITORY:TAG or REPOSITORY@sha256:...); no implicit latest."
  }
}

variable "compute" {
  description = "Where tasks run: \"gpu\" (EC2 GPU instances from an Auto Scaling group) or \"fargate\" (CPU only)."
  type        = string
  default     = "gpu"
  validation {
    condition     = contains(["gpu", "fargate"], var.compute)
    error_message = "compute: \"gpu\" or \"fargate\"."
  }
}

variable "gpu_instance_type" {
  description = "EC2 instance type of the GPU capacity (one task per GPU)."
  type        = string
  default     = "g5.xlarge"
  validation {
    condition     = can(regex("^(g4dn|g5|g6|g6e|gr6|p3|p4d|p4de|p5|p5e|p5en)\\.[0-9]*x?large$", var.gpu_instance_type))
    error_message = "gpu_instance_type: an NVIDIA GPU instance type (g4dn, g5, g6, g6e, gr6, p3, p4d, p5 families), e.g. g5.xlarge."
  }
}

variable "gpu_instances_max" {
  description = "Most GPU instances the Auto Scaling group may start (ECS scales it between 0 and this)."
  type        = number
  default     = 8
  validation {
    condition     = var.gpu_instances_max >= 1 && var.gpu_instances_max <= 100
    error_message = "gpu_instances_max: 1 to 100."
  }
}

variable "gpu_ami_ssm_parameter" {
  description = "Public SSM parameter naming the ECS GPU-optimized AMI."
  type        = string
  default     = "/aws/service/ecs/optimized-ami/amazon-linux-2023/gpu/recommended/image_id"
  validation {
    condition     = startswith(var.gpu_ami_ssm_parameter, "/aws/service/ecs/optimized-ami/")
    error_message = "gpu_ami_ssm_parameter: one of the ECS-optimized AMI parameters under /aws/service/ecs/optimized-ami/."
  }
}

variable "gpus_per_task" {
  description = "GPUs reserved per task (compute = gpu)."
  type        = number
  default     = 1
  validation {
    condition     = var.gpus_per_task >= 1 && var.gpus_per_task <= 8
    error_message = "gpus_per_task: 1 to 8."
  }
}

variable "task_cpu" {
  description = "CPU units per task (1024 = 1 vCPU); on Fargate one of its sizes. null: 3584 on gpu (a g5.xlarge less the agent's share), 4096 on fargate."
  type        = number
  default     = null
  validation {
    condition     = var.task_cpu == null || (coalesce(var.task_cpu, 0) >= 256 && coalesce(var.task_cpu, 0) <= 16384)
    error_message = "task_cpu: 256 to 16384 CPU units."
  }
}

variable "task_memory_mib" {
  description = "Memory per task, MiB (below the instance's memory on EC2: g5.xlarge offers ~15,300). null: 14336 on gpu, 8192 on fargate."
  type        = number
  default     = null
  validation {
    condition     = var.task_memory_mib == null || (coalesce(var.task_memory_mib, 0) >= 512 && coalesce(var.task_memory_mib, 0) <= 122880)
    error_message = "task_memory_mib: 512 to 122880."
  }
}

# -- the fnserve command line ------------------------------------------------------------------

variable "model_prefix" {
  description = "Key prefix of the model repository in the bucket (served as s3://BUCKET/PREFIX)."
  type        = string
  default     = "models"
  validation {
    condition     = can(regex("^[A-Za-z0-9!_.*'()-]+(/[A-Za-z0-9!_.*'()-]+)*$", var.model_prefix))
    error_message = "model_prefix: a key prefix without leading or trailing '/', e.g. models or prod/models."
  }
}

variable "bucket_name" {
  description = "Model repository bucket name; null: NAME-models-ACCOUNT_ID."
  type        = string
  default     = null
  validation {
    condition     = var.bucket_name == null || can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.bucket_name))
    error_message = "bucket_name: 3-63 characters, lower-case letters, digits, '.' and '-'."
  }
}

variable "repository_poll_s" {
  description = "Seconds between two looks at the model repository (--repository-poll-secs): new versions in S3 load without a redeploy."
  type        = number
  default     = 30
  validation {
    condition     = var.repository_poll_s >= 5
    error_message = "repository_poll_s: 5 seconds or more (each look lists the prefix)."
  }
}

variable "shutdown_timeout_s" {
  description = "fnserve --shutdown-timeout: seconds in-flight requests get after SIGTERM. ECS kills at 120 s, so at most 110."
  type        = number
  default     = 30
  validation {
    condition     = var.shutdown_timeout_s >= 1 && var.shutdown_timeout_s <= 110
    error_message = "shutdown_timeout_s: 1 to 110 (ECS sends SIGKILL 120 s after SIGTERM at most)."
  }
}

variable "startup_grace_s" {
  description = "Seconds a new task has to download and load its models before health checks count."
  type        = number
  default     = 300
  validation {
    condition     = var.startup_grace_s >= 30 && var.startup_grace_s <= 3600
    error_message = "startup_grace_s: 30 to 3600."
  }
}

variable "extra_serve_args" {
  description = "More `fnserve serve` flags for both services (e.g. [\"--max-queue-size\", \"256\"])."
  type        = list(string)
  default     = []
}

# -- scaling ------------------------------------------------------------------------------------

variable "online_min" {
  description = "Fewest online tasks (at least 1: the online service also publishes the job backlog metric)."
  type        = number
  default     = 1
  validation {
    condition     = var.online_min >= 1
    error_message = "online_min: 1 or more (0 would stop the backlog metric and the API)."
  }
}

variable "online_max" {
  description = "Most online tasks."
  type        = number
  default     = 8
  validation {
    condition     = var.online_max >= 1 && var.online_max <= 200
    error_message = "online_max: 1 to 200."
  }
}

variable "online_requests_per_target_per_minute" {
  description = "Target of ALBRequestCountPerTarget (requests per task per minute) the online service scales to keep; see docs/scale-out.md for sizing."
  type        = number
  default     = 30000
  validation {
    condition     = var.online_requests_per_target_per_minute >= 60
    error_message = "online_requests_per_target_per_minute: 60 or more."
  }
}

variable "worker_max" {
  description = "Most job-worker tasks (the service scales between 0 and this on the job backlog)."
  type        = number
  default     = 4
  validation {
    condition     = var.worker_max >= 1 && var.worker_max <= 20
    error_message = "worker_max: 1 to 20."
  }
}

variable "jobs_per_worker" {
  description = "Queued jobs one worker is expected to absorb: the backlog step between one worker count and the next."
  type        = number
  default     = 50
  validation {
    condition     = var.jobs_per_worker >= 1
    error_message = "jobs_per_worker: 1 or more."
  }
}

variable "worker_scale_out_cooldown_s" {
  description = "Seconds between two scale-outs of the workers while jobs stay queued: about the time a new worker takes to start (a GPU instance boot and image pull: minutes)."
  type        = number
  default     = 240
  validation {
    condition     = var.worker_scale_out_cooldown_s >= 60 && var.worker_scale_out_cooldown_s <= 1800
    error_message = "worker_scale_out_cooldown_s: 60 to 1800."
  }
}

variable "worker_idle_minutes" {
  description = "Minutes the backlog must stay at 0 before workers scale back to zero (keep it above the longest job: running jobs are not in the backlog)."
  type        = number
  default     = 10
  validation {
    condition     = var.worker_idle_minutes >= 1 && var.worker_idle_minutes <= 60
    error_message = "worker_idle_minutes: 1 to 60."
  }
}

variable "worker_max_queue_age_s" {
  description = "Oldest queued job age (seconds) past which one more worker starts, whatever the backlog size."
  type        = number
  default     = 300
  validation {
    condition     = var.worker_max_queue_age_s >= 10
    error_message = "worker_max_queue_age_s: 10 or more."
  }
}

# -- the backlog metric ------------------------------------------------------------------------

variable "metrics_namespace" {
  description = "CloudWatch namespace of the metrics the online tasks publish."
  type        = string
  default     = "fnserve"
}

variable "backlog_metric_name" {
  description = "Prometheus gauge (on fnserve's metrics port) of queued jobs per model."
  type        = string
  default     = "fnserve_jobs_queue_depth"
  validation {
    condition     = can(regex("^[a-zA-Z_:][a-zA-Z0-9_:]*$", var.backlog_metric_name))
    error_message = "backlog_metric_name: a Prometheus metric name."
  }
}

variable "queue_age_metric_name" {
  description = "Prometheus gauge of the age in seconds of the oldest queued job."
  type        = string
  default     = "fnserve_jobs_oldest_queued_age_seconds"
  validation {
    condition     = can(regex("^[a-zA-Z_:][a-zA-Z0-9_:]*$", var.queue_age_metric_name))
    error_message = "queue_age_metric_name: a Prometheus metric name."
  }
}

variable "cloudwatch_agent_image" {
  description = "CloudWatch agent image of the online task's metrics sidecar (pin a version in production)."
  type        = string
  default     = "public.ecr.aws/cloudwatch-agent/cloudwatch-agent:latest"
}

# -- database, logs, lifecycle ------------------------------------------------------------------

variable "db_instance_class" {
  description = "RDS PostgreSQL instance class of the jobs database."
  type        = string
  default     = "db.t4g.small"
  validation {
    condition     = startswith(var.db_instance_class, "db.")
    error_message = "db_instance_class: an RDS class such as db.t4g.small."
  }
}

variable "db_allocated_storage_gb" {
  description = "Initial storage of the jobs database (grows to 4x automatically)."
  type        = number
  default     = 20
  validation {
    condition     = var.db_allocated_storage_gb >= 20 && var.db_allocated_storage_gb <= 16384
    error_message = "db_allocated_storage_gb: 20 to 16384."
  }
}

variable "db_multi_az" {
  description = "A standby database in a second AZ (doubles its cost)."
  type        = bool
  default     = false
}

variable "deletion_protection" {
  description = "Protect the database (final snapshot) and keep a non-empty bucket on destroy; set false before `terraform destroy` of a test fleet."
  type        = bool
  default     = true
}

variable "log_retention_days" {
  description = "Days container logs and metrics logs are kept."
  type        = number
  default     = 30
  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days: a CloudWatch Logs retention (1, 3, 5, 7, 14, 30, 60, 90, ... 3653)."
  }
}
