"""Generated protobuf and grpclib modules; regenerate with `python -m fnserve.server.grpc.generate`."""
