# The Application Load Balancer in front of the online service. One TLS listener (443, the ACM
# certificate) carries both protocols: gRPC calls (paths /inference.GRPCInferenceService/* and
# /grpc.health.v1.Health/*) go to the gRPC target group (port 8001, protocol version GRPC),
# everything else to the HTTP target group (port 8000, KServe v2 REST). Port 80 redirects.
#
# Health checks: HTTP asks GET /v2/health/ready (200 only while the server is ready: during a
# SIGTERM drain it answers 400, so the target leaves rotation); gRPC calls
# grpc.health.v1.Health/Check and expects gRPC status 0.

resource "aws_security_group" "alb" {
  name        = "${var.name}-alb"
  description = "fnserve load balancer: HTTPS from the allowed networks"
  vpc_id      = var.vpc_id
}

resource "aws_vpc_security_group_ingress_rule" "https" {
  for_each          = toset(var.allowed_cidrs)
  security_group_id = aws_security_group.alb.id
  cidr_ipv4         = each.value
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  description       = "HTTPS and gRPC over TLS"
}

resource "aws_vpc_security_group_ingress_rule" "http_redirect" {
  for_each          = toset(var.allowed_cidrs)
  security_group_id = aws_security_group.alb.id
  cidr_ipv4         = each.value
  ip_protocol       = "tcp"
  from_port         = 80
  to_port           = 80
  description       = "redirected to HTTPS"
}

resource "aws_vpc_security_group_egress_rule" "to_targets" {
  security_group_id            = aws_security_group.alb.id
  referenced_security_group_id = var.target_security_group_id
  ip_protocol                  = "tcp"
  from_port                    = var.http_port
  to_port                      = var.grpc_port
  description                  = "fnserve HTTP and gRPC ports"
}

resource "aws_lb" "this" {
  name                       = var.name
  load_balancer_type         = "application"
  internal                   = var.internal
  subnets                    = var.subnet_ids
  security_groups            = [aws_security_group.alb.id]
  drop_invalid_header_fields = true
  idle_timeout               = var.idle_timeout_s
  enable_deletion_protection = var.deletion_protection
}

resource "aws_lb_target_group" "http" {
  name                 = "${var.name}-http"
  port                 = var.http_port
  protocol             = var.target_protocol
  protocol_version     = "HTTP1"
  target_type          = "ip"
  vpc_id               = var.vpc_id
  deregistration_delay = var.deregistration_delay_s
  health_check {
    path                = "/v2/health/ready"
    protocol            = var.target_protocol
    matcher             = "200"
    interval            = 10
    timeout             = 5
    healthy_threshold   = 2
    unhealthy_threshold = 2
  }
}

resource "aws_lb_target_group" "grpc" {
  name                 = "${var.name}-grpc"
  port                 = var.grpc_port
  protocol             = var.target_protocol
  protocol_version     = "GRPC"
  target_type          = "ip"
  vpc_id               = var.vpc_id
  deregistration_delay = var.deregistration_delay_s
  health_check {
    path                = "/grpc.health.v1.Health/Check"
    protocol            = var.target_protocol
    matcher             = "0"
    interval            = 10
    timeout             = 5
    healthy_threshold   = 2
    unhealthy_threshold = 2
  }
}

resource "aws_lb_listener" "https" {
  load_balancer_arn = aws_lb.this.arn
  port              = 443
  protocol          = "HTTPS"
  ssl_policy        = var.ssl_policy
  certificate_arn   = var.certificate_arn
  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.http.arn
  }
}

resource "aws_lb_listener_rule" "grpc" {
  listener_arn = aws_lb_listener.https.arn
  priority     = 10
  action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.grpc.arn
  }
  condition {
    path_pattern {
      values = ["/inference.GRPCInferenceService/*", "/grpc.health.v1.Health/*"]
    }
  }
}

resource "aws_lb_listener" "http_redirect" {
  load_balancer_arn = aws_lb.this.arn
  port              = 80
  protocol          = "HTTP"
  default_action {
    type = "redirect"
    redirect {
      port        = "443"
      protocol    = "HTTPS"
      status_code = "HTTP_301"
    }
  }
}
