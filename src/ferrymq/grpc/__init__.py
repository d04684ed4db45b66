"""The RocketMQ 5 front: a gRPC endpoint speaking `apache.rocketmq.v2` inside the broker."""
