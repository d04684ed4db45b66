"""`ferrymq proxy`: RocketMQ 5's proxy in cluster mode. One process serves apache.rocketmq.v2 for
every broker group registered with a name server, reaching the brokers over remoting with the
client package; the gRPC service itself is grpc/'s, on `ferrymq/proxy/backend.py:ClusterBackend`.
It keeps no state of its own (docs/grpc.md, "The proxy")."""
