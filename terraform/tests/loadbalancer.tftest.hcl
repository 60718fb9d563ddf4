# modules/loadbalancer: ports, protocols and health checks of the HTTP and gRPC target groups.

mock_provider "aws" {
  source = "./tests/mocks"
}

run "alb" {
  command = apply
  module {
    source = "./modules/loadbalancer"
  }
  variables {
    name                     = "fnserve"
    vpc_id                   = "vpc-0123456789abcdef0"
    subnet_ids               = ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]
    allowed_cidrs            = ["0.0.0.0/0"]
    certificate_arn          = "arn:aws:acm:us-east-1:123456789012:certificate/0a1b2c3d"
    target_security_group_id = "sg-0123456789abcdef0"
    http_port                = 8000
    grpc_port                = 8001
    target_protocol          = "HTTP"
    deregistration_delay_s   = 30
  }

  assert {
    condition = (
      aws_lb_target_group.http.port == 8000 &&
      aws_lb_target_group.http.protocol_version == "HTTP1" &&
      aws_lb_target_group.http.target_type == "ip"
    )
    error_message = "the HTTP target group sends HTTP/1.1 to port 8000 of each task's IP"
  }
  assert {
    condition = (
      aws_lb_target_group.http.health_check[0].path == "/v2/health/ready" &&
      aws_lb_target_group.http.health_check[0].matcher == "200"
    )
    error_message = "HTTP targets are healthy while GET /v2/health/ready answers 200 (400 while draining)"
  }
  assert {
    condition     = aws_lb_target_group.grpc.port == 8001 && aws_lb_target_group.grpc.protocol_version == "GRPC"
    error_message = "the gRPC target group speaks gRPC to port 8001"
  }
  assert {
    condition = (
      aws_lb_target_group.grpc.health_check[0].path == "/grpc.health.v1.Health/Check" &&
      aws_lb_target_group.grpc.health_check[0].matcher == "0"
    )
    error_message = "gRPC targets are checked through grpc.health.v1.Health/Check, healthy on gRPC status 0"
  }
  assert {
    condition = (
      aws_lb_listener.https.port == 443 &&
      aws_lb_listener.https.protocol == "HTTPS" &&
      aws_lb_listener.https.certificate_arn == var.certificate_arn &&
      startswith(aws_lb_listener.https.ssl_policy, "ELBSecurityPolicy-TLS13")
    )
    error_message = "one TLS listener on 443 with the ACM certificate given and a TLS 1.3 policy"
  }
  assert {
    condition = (
      contains(one(aws_lb_listener_rule.grpc.condition).path_pattern[0].values, "/inference.GRPCInferenceService/*") &&
      one(aws_lb_listener_rule.grpc.action).target_group_arn == aws_lb_target_group.grpc.arn
    )
    error_message = "gRPC calls to inference.GRPCInferenceService are routed to the gRPC target group"
  }
  assert {
    condition     = aws_lb_listener.http_redirect.port == 80 && aws_lb_listener.http_redirect.default_action[0].redirect[0].protocol == "HTTPS"
    error_message = "port 80 only redirects to HTTPS"
  }
  assert {
    condition     = aws_lb_target_group.http.deregistration_delay == "30" && aws_lb.this.drop_invalid_header_fields
    error_message = "draining targets get the shutdown timeout; invalid headers are dropped"
  }
  assert {
    condition = (
      aws_vpc_security_group_egress_rule.to_targets.from_port == 8000 &&
      aws_vpc_security_group_egress_rule.to_targets.to_port == 8001 &&
      aws_vpc_security_group_egress_rule.to_targets.referenced_security_group_id == var.target_security_group_id
    )
    error_message = "the load balancer reaches the tasks on 8000-8001 only (not the metrics port)"
  }
}
