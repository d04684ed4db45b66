"""The simple consumer, async core: precise acknowledgement by pop (RocketMQ 5's
SimpleConsumer over the remoting protocol). receive() hands out messages that stay invisible
to the group for `invisible_duration`; each one is acknowledged on its own (ack), or given
more or less time (change_invisible_duration); one not acknowledged in time is received again,
its reconsume count one higher, and once past the broker's max reconsume times it goes to
%DLQ%<group>. No rebalance and no offsets here: the broker keeps the group's state, so any
number of members share every queue. `SimpleConsumer` (blocking) and
`ferrymq.aio.SimpleConsumer` are this class."""

from __future__ import annotations

import logging
from typing import Any

from ...acl.signing import credentials_from
from ...common.codes import ResponseCode
from ...common.message import MessageExt, MessageQueue
from ...common.names import validate_group, validate_topic
from ...common.popinfo import ExtraInfo
from ...remoting.tls import TlsClientSettings, resolve_client_tls
from ..errors import BrokerError, ClientError
from ..instance import ClientInstance, InstanceConfig, abandon, acquire_async, release
from ..lifecycle import Lifecycle, State
from ..pop_api import ack as ack_request
from ..pop_api import change_invisible, pop
from .subscription import MessageSelector, Subscription
from .types import ConsumeFromWhere

log = logging.getLogger("ferrymq.client.simple")

MAX_RECEIVE = 32  # per request, the broker's limit


class ReceiptHandleError(ClientError):
    """The broker no longer knows the message under this receipt handle: it was acknowledged,
    or handed out again after its invisible time ran out (a newer handle exists)."""

    def __init__(self, handle: str, remark: str | None) -> None:
        super().__init__(f"receipt handle {handle!r} is not valid any more: {remark}")
        self.handle = handle
        self.remark = remark


class MessageView:
    """A received message and the receipt handle that acknowledges it."""

    __slots__ = ("_handle", "message")

    def __init__(self, message: MessageExt, handle: ExtraInfo) -> None:
        self.message = message
        self._handle = handle

    @property
    def receipt_handle(self) -> str:
        return self._handle.encode()

    @property
    def handle(self) -> ExtraInfo:
        return self._handle

    @property
    def topic(self) -> str:
        return self.message.topic

    @property
    def body(self) -> bytes:
        return self.message.body

    @property
    def tags(self) -> str | None:
        return self.message.tags

    @property
    def keys(self) -> str | None:
        return self.message.keys

    @property
    def msg_id(self) -> str:
        return self.message.msg_id

    @property
    def properties(self) -> dict[str, str]:
        return self.message.properties

    @property
    def queue(self) -> MessageQueue:
        return MessageQueue(self.message.topic, self._handle.broker_name, self.message.queue_id)

    @property
    def queue_offset(self) -> int:
        return self.message.queue_offset

    @property
    def reconsume_times(self) -> int:
        return self.message.reconsume_times

    @property
    def delivery_attempt(self) -> int:
        return self.message.reconsume_times + 1

    @property
    def invisible_until_ms(self) -> int:
        """When the broker hands the message out again unless it is acknowledged first."""
        return self._handle.deadline

    def __repr__(self) -> str:
        return (f"MessageView(topic={self.topic!r}, queue={self.message.queue_id}, "
                f"offset={self.queue_offset}, msg_id={self.msg_id!r}, "
                f"attempt={self.delivery_attempt})")


class AsyncSimpleConsumer(Lifecycle):
    kind = "SimpleConsumer"
    consume_type = "CONSUME_POP"

    def __init__(
        self,
        group: str,
        namesrv: str = "127.0.0.1:9876",
        *,
        await_duration: float = 20.0,
        orderly: bool = False,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.FIRST_OFFSET,
        request_timeout: float = 3.0,
        heartbeat_interval: float = 30.0,
        route_refresh_interval: float = 30.0,
        access_key: str | None = None,
        secret_key: str | None = None,
        tls: TlsClientSettings | bool | None = None,
    ) -> None:
        """`await_duration`: how long a receive() that finds nothing waits on the broker for a
        message (long polling, at most 20 s). `orderly`: a queue's next message is received
        only once the previous ones are acknowledged (or their invisible time ran out).
        `consume_from_where`: where a group new to a queue starts (first or last offset)."""
        super().__init__()
        validate_group(group)
        if await_duration < 0:
            raise ValueError("await_duration must be >= 0")
        self.group = group
        self.namesrv = namesrv
        self.await_duration = await_duration
        self.orderly = orderly
        self.consume_from_where = consume_from_where
        self.instance_config = InstanceConfig(namesrv, route_refresh_interval, heartbeat_interval,
                                              request_timeout,
                                              credentials=credentials_from(access_key, secret_key),
                                              tls=resolve_client_tls(tls))
        self.subscriptions: dict[str, Subscription] = {}
        self._inst: ClientInstance | None = None
        self._rr = 0

    @property
    def inst(self) -> ClientInstance:
        if self._inst is None:
            raise ClientError(f"{self.kind} {self.group} is not started")
        return self._inst

    # --- configuration ---------------------------------------------------------------------------
    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        validate_topic(topic)
        self.subscriptions[topic] = Subscription.parse(topic, expression)

    def unsubscribe(self, topic: str) -> None:
        self.subscriptions.pop(topic, None)

    # --- ConsumerMember (the client instance heartbeats for it) ----------------------------------
    def topics(self) -> set[str]:
        return set(self.subscriptions)

    def heartbeat_data(self) -> dict[str, Any]:
        return {
            "consumeFromWhere": self.consume_from_where.value,
            "consumeType": self.consume_type,
            "groupName": self.group,
            "messageModel": "CLUSTERING",
            "subscriptionDataSet": [s.to_json() for s in self.subscriptions.values()],
            "unitMode": False,
        }

    def trigger_rebalance(self) -> None:
        return None  # members of a pop group share every queue

    async def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        return None  # the broker holds the group's progress; nothing is cached here

    def running_info(self) -> dict[str, Any]:
        return {
            "properties": {"consumeType": self.consume_type, "messageModel": "CLUSTERING",
                           "consumeFromWhere": self.consume_from_where.value,
                           "consumeOrderly": str(self.orderly).lower()},
            "subscriptionSet": [s.to_json() for s in self.subscriptions.values()],
            "mqTable": {},
            "statusTable": {},
        }

    async def consume_directly(self, msg: MessageExt, broker: str) -> dict[str, Any]:
        return {"order": False, "autoCommit": True, "consumeResult": "CR_THROW_EXCEPTION",
                "remark": "a simple consumer cannot consume directly", "spentTimeMills": 0}

    # --- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        self.require_created("start")
        inst = acquire_async(self.instance_config, "C", self.group)
        try:
            await self.attach(inst)
        except BaseException:
            self.state = State.SHUTDOWN
            await abandon(inst, "C", self.group)
            raise

    async def attach(self, inst: ClientInstance) -> None:
        self._inst = inst
        self.state = State.RUNNING
        inst.register_consumer(self)
        for topic in sorted(self.subscriptions):
            await inst.update_route(topic)
        await inst.heartbeat_now()

    async def shutdown(self) -> bool:
        """Leave the group. Messages received and not acknowledged come back to the group
        when their invisible time runs out."""
        if self.state is not State.RUNNING:
            self.state = State.SHUTDOWN
            return False
        self.state = State.SHUTDOWN
        inst = self.inst
        await inst.unregister(consumer_group=self.group)
        return await release(inst, "C", self.group)

    async def __aenter__(self) -> AsyncSimpleConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # --- consuming -------------------------------------------------------------------------------
    async def _targets(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for topic in sorted(self.subscriptions):
            route = await self.inst.route(topic)
            if route is not None:
                out += sorted({(topic, mq.broker_name) for mq in route.read_queues()})
        return out

    async def receive(self, max_messages: int = 16, invisible_duration: float = 30.0, *,
                      await_duration: float | None = None) -> list[MessageView]:
        """Up to max_messages (1..32) messages of the subscribed topics, invisible to the
        group for invisible_duration seconds. Waits up to await_duration (default: the
        consumer's) for one when there is none."""
        self.require_running("receive")
        if not 1 <= max_messages <= MAX_RECEIVE:
            raise ValueError(f"max_messages must be within 1..{MAX_RECEIVE}")
        invisible_ms = int(invisible_duration * 1000)
        if invisible_ms <= 0:
            raise ValueError("invisible_duration must be > 0")
        wait = self.await_duration if await_duration is None else await_duration
        targets = await self._targets()
        if not targets:
            return []
        start = self._rr
        self._rr += 1
        n = len(targets)
        poll_ms = int(wait * 1000)
        if n > 1:  # one pass without waiting over every broker and topic, then a held request
            for i in range(n):
                views = await self._pop(*targets[(start + i) % n], max_messages, invisible_ms, 0)
                if views:
                    return views
            if poll_ms <= 0:
                return []
        return await self._pop(*targets[start % n], max_messages, invisible_ms, poll_ms)

    async def _pop(self, topic: str, broker: str, max_messages: int, invisible_ms: int,
                   poll_ms: int) -> list[MessageView]:
        inst = self.inst
        addr = await inst.find_broker_addr(broker, topic)
        if addr is None:
            return []
        sub = self.subscriptions[topic]
        init_mode = 0 if self.consume_from_where is ConsumeFromWhere.FIRST_OFFSET else 1
        try:
            answer = await pop(inst.api, addr, broker, group=self.group, topic=topic,
                               max_nums=max_messages, invisible_ms=invisible_ms, poll_ms=poll_ms,
                               expression=sub.expression, expression_type=sub.expression_type,
                               order=self.orderly, init_mode=init_mode)
        except Exception as exc:
            await inst.after_failure(topic, exc)
            raise
        views: list[MessageView] = []
        for p in answer.messages:
            view = MessageView(p.message, p.handle)
            if sub.accepts(p.message):
                views.append(view)
            else:  # a tag whose hash matched another's: not ours, acknowledged unseen
                await self.ack(view)
        return views

    async def _addr(self, view: MessageView) -> str:
        addr = await self.inst.find_broker_addr(view.handle.broker_name, view.topic)
        if addr is None:
            raise ClientError(f"no address for broker {view.handle.broker_name}")
        return addr

    async def ack(self, message: MessageView) -> None:
        """Acknowledge: the group never receives this message again. Returns once the broker
        has it on disk."""
        self.require_running("ack")
        await ack_request(self.inst.api, await self._addr(message), group=self.group,
                          topic=message.topic, handle=message.handle)

    async def change_invisible_duration(self, message: MessageView, duration: float) -> None:
        """The message stays invisible `duration` seconds from now (longer or shorter than
        before); its receipt handle is replaced by the new one."""
        self.require_running("change invisible duration")
        try:
            handle = await change_invisible(self.inst.api, await self._addr(message),
                                            group=self.group, topic=message.topic,
                                            handle=message.handle,
                                            invisible_ms=max(0, int(duration * 1000)))
        except BrokerError as exc:
            if exc.code == ResponseCode.NO_MESSAGE:
                raise ReceiptHandleError(message.receipt_handle, exc.remark) from None
            raise
        message._handle = handle
        message.message.properties["POP_CK"] = handle.encode()
