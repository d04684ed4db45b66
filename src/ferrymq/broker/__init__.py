"""The broker: request processors over the store, replication, POP, timers, transactions and traces
(controller.py assembles them)."""
