"""Push and lite pull consumers: rebalance, process queues, consume services, offset stores."""
