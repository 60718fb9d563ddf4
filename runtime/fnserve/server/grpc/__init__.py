"""The gRPC frontend: Triton's `inference.GRPCInferenceService` and `grpc.health.v1` on grpclib."""
