"""ferrymq's RocketMQ clients: producer, push consumer, lite pull consumer and admin client.

The blocking classes run their async core on a private event-loop thread; `ferrymq.aio` has
the same names with async methods."""
