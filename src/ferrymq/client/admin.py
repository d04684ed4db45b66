"""The blocking administration client: AsyncAdminClient run on a private event-loop thread,
every method generated from the async client's (see blocking.py)."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Coroutine
from typing import Any, TypeVar

from ..common.message import MessageQueue
from ..remoting.tls import TlsClientSettings
from .admin_async import AsyncAdminClient
from .blocking import Facade, blocking
from .loop import LoopThread
from .results import RawPullResult

T = TypeVar("T")


class AdminClient(Facade[AsyncAdminClient]):
    """Blocking admin client. Thread-safe: calls from several threads share one connection per
    broker. Use as a context manager or call close()."""

    def __init__(
        self, namesrv: str = "127.0.0.1:9876", *, timeout: float = 3.0, route_ttl: float = 5.0,
        access_key: str | None = None, secret_key: str | None = None,
        tls: TlsClientSettings | bool | None = None,
    ) -> None:
        self._impl = AsyncAdminClient(namesrv, timeout=timeout, route_ttl=route_ttl,
                                      access_key=access_key, secret_key=secret_key, tls=tls)
        self._loop: LoopThread = LoopThread("ferrymq-admin")
        # A call waits for its requests plus scheduling slack; a hung broker cannot hang us.
        self._call_timeout = timeout * 4 + 5

    @property
    def namesrv(self) -> str:
        return self._impl.namesrv

    def _run_blocking(self, coro: Coroutine[Any, Any, T], action: str) -> T:
        return self._loop.run(coro, self._call_timeout)

    def close(self) -> None:
        try:
            self._loop.run(self._impl.close(), self._call_timeout)
        finally:
            self._loop.stop()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit_pull_raw(
        self, mq: MessageQueue, offset: int, max_nums: int = 32, *, expression: str = "*",
        expression_type: str = "TAG",
    ) -> concurrent.futures.Future[RawPullResult]:
        """pull_raw without waiting: the request is on its way when this returns, and the
        future completes on the client's loop. Lets a caller keep several pulls in flight
        from one thread (the Spark reader reads ahead this way)."""
        return self._loop.submit(
            self._impl.pull_raw(
                mq, offset, max_nums, expression=expression, expression_type=expression_type
            )
        )

    topic_route = blocking(AsyncAdminClient.topic_route)
    message_queues = blocking(AsyncAdminClient.message_queues)
    broker_addr = blocking(AsyncAdminClient.broker_addr)
    brokers = blocking(AsyncAdminClient.brokers)
    cluster_brokers = blocking(AsyncAdminClient.cluster_brokers)
    cluster_list = blocking(AsyncAdminClient.cluster_list)
    broker_status = blocking(AsyncAdminClient.broker_status)
    broker_config = blocking(AsyncAdminClient.broker_config)
    update_broker_config = blocking(AsyncAdminClient.update_broker_config)
    store_damage = blocking(AsyncAdminClient.store_damage)
    skip_store_range = blocking(AsyncAdminClient.skip_store_range)
    max_offset = blocking(AsyncAdminClient.max_offset)
    min_offset = blocking(AsyncAdminClient.min_offset)
    search_offset = blocking(AsyncAdminClient.search_offset)
    pull = blocking(AsyncAdminClient.pull)
    pull_raw = blocking(AsyncAdminClient.pull_raw)
    query_consumer_offset = blocking(AsyncAdminClient.query_consumer_offset)
    update_consumer_offset = blocking(AsyncAdminClient.update_consumer_offset)
    acknowledged = blocking(AsyncAdminClient.acknowledged)
    acknowledge = blocking(AsyncAdminClient.acknowledge)
    create_topic = blocking(AsyncAdminClient.create_topic)
    delete_topic = blocking(AsyncAdminClient.delete_topic)
    update_topic_perm = blocking(AsyncAdminClient.update_topic_perm)
    topic_list = blocking(AsyncAdminClient.topic_list)
    topic_status = blocking(AsyncAdminClient.topic_status)
    topic_message_types = blocking(AsyncAdminClient.topic_message_types)
    consume_stats = blocking(AsyncAdminClient.consume_stats)
    group_progress = blocking(AsyncAdminClient.group_progress)
    reset_offset_by_time = blocking(AsyncAdminClient.reset_offset_by_time)
    consumer_connections = blocking(AsyncAdminClient.consumer_connections)
    consumer_ids = blocking(AsyncAdminClient.consumer_ids)
    consumer_groups = blocking(AsyncAdminClient.consumer_groups)
    subscription_groups = blocking(AsyncAdminClient.subscription_groups)
    update_subscription_group = blocking(AsyncAdminClient.update_subscription_group)
    delete_subscription_group = blocking(AsyncAdminClient.delete_subscription_group)
    masterless_brokers = blocking(AsyncAdminClient.masterless_brokers)
    end_transaction = blocking(AsyncAdminClient.end_transaction)
    view_message = blocking(AsyncAdminClient.view_message)
    query_message = blocking(AsyncAdminClient.query_message)
    query_by_uniq_key = blocking(AsyncAdminClient.query_by_uniq_key)
    find_by_uniq_key = blocking(AsyncAdminClient.find_by_uniq_key)
    message_tracks = blocking(AsyncAdminClient.message_tracks)
    message_trace = blocking(AsyncAdminClient.message_trace)
    topic_route_data = blocking(AsyncAdminClient.topic_route_data)
    topic_clusters = blocking(AsyncAdminClient.topic_clusters)
    wipe_write_perm = blocking(AsyncAdminClient.wipe_write_perm)
    add_write_perm = blocking(AsyncAdminClient.add_write_perm)
    namesrv_config = blocking(AsyncAdminClient.namesrv_config)
    update_namesrv_config = blocking(AsyncAdminClient.update_namesrv_config)
    kv_get = blocking(AsyncAdminClient.kv_get)
    kv_list = blocking(AsyncAdminClient.kv_list)
    kv_put = blocking(AsyncAdminClient.kv_put)
    kv_delete = blocking(AsyncAdminClient.kv_delete)
    send_round_trips = blocking(AsyncAdminClient.send_round_trips)
    elect_master = blocking(AsyncAdminClient.elect_master)
    clean_unused_topics = blocking(AsyncAdminClient.clean_unused_topics)
    read_brokers = blocking(AsyncAdminClient.read_brokers)
    producer_connections = blocking(AsyncAdminClient.producer_connections)
    consumer_status = blocking(AsyncAdminClient.consumer_status)
    clone_group_offset = blocking(AsyncAdminClient.clone_group_offset)
    broker_consume_stats = blocking(AsyncAdminClient.broker_consume_stats)
    stats_all = blocking(AsyncAdminClient.stats_all)
