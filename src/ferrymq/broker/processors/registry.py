"""Every request processor wired into the broker's remoting server, each behind the guard that
answers its request errors."""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable

from ...common.codes import ResponseCode
from ...common.headers import HeaderError
from ...common.histogram import Histogram
from ...common.names import InvalidNameError
from ...remoting import Connection, RemotingCommand, RemotingServer
from ..clients import SubscriptionParseError, UnsupportedFilterError
from ..context import BrokerContext
from ..groups import GroupConfigError, GroupRefused
from . import Handler, admin, consumer, groups, ops, pop, pull, recall, reply, send, store_admin, trace, transaction

Served = Callable[[Connection, RemotingCommand], Awaitable[RemotingCommand | None]]


def _guard(broker: BrokerContext, handler: Handler, latency: Histogram | None = None) -> Served:
    """`handler` with request errors answered; with `latency`, its handling time (arrival at
    the handler to the answer) observed there."""
    perf_counter = time.perf_counter

    @functools.wraps(handler)
    async def run(conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
        if broker.store is None:
            return reply(req, ResponseCode.SYSTEM_BUSY, "broker is starting")
        started = perf_counter() if latency is not None else 0.0
        try:
            return await handler(broker, conn, req)
        except HeaderError as exc:
            return reply(req, ResponseCode.SYSTEM_ERROR, f"bad request header: {exc}")
        except InvalidNameError as exc:
            return reply(req, ResponseCode.MESSAGE_ILLEGAL, str(exc))
        except UnsupportedFilterError as exc:
            return reply(req, ResponseCode.SYSTEM_ERROR, str(exc))
        except SubscriptionParseError as exc:
            return reply(req, ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc))
        except GroupRefused as exc:
            return reply(req, exc.code, str(exc))
        except GroupConfigError as exc:
            # Not SYSTEM_ERROR, which clients retry: the same request is refused again.
            return reply(req, ResponseCode.INVALID_PARAMETER, str(exc))
        finally:
            if latency is not None:
                latency.observe(perf_counter() - started)

    return run


def register_all(broker: BrokerContext, server: RemotingServer) -> None:
    for module in (send, recall, pull, consumer, admin, groups, ops, store_admin, pop, transaction, trace):
        for code, handler in module.HANDLERS.items():
            latency = broker.stats.send_latency if code in send.TIMED else None
            server.register(code, _guard(broker, handler, latency))
