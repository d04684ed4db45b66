"""The dashboard's JSON endpoints: every answer comes from the cluster through an admin client
signed with the caller's account (and the lag sampler's history), never from broker internals."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..client.admin_async import AsyncAdminClient
from ..client.errors import NoPermissionError, NoRouteError
from ..client.results import ConsumerConnections
from ..common import topic_types
from ..common.errors import FerryMQError
from ..common.headers import PERM_READ, PERM_WRITE
from ..common.names import dlq_topic, is_dlq_topic, is_reserved_topic, is_retry_topic, retry_topic
from . import dlq, messages
from .clients import AccountClients
from .gate import Actor
from .httpd import HttpError, Request, Response
from .lag import LagSampler

MAX_PAGE = 200
# The newest messages a topic page lists (one pull of this many per queue).
MAX_LATEST = 32
# How many topics' queue tables are asked at once for one page of the topic list.
STATUS_FANOUT = 16
# What only an admin account may do: the brokers refuse a topic create to any other account,
# and a re-drive writes the tools group's offsets on every DLQ. Refused here too, so an address
# the ACL file white-lists does not let any login do them.
ADMIN_ONLY = frozenset({("POST", "/api/topics"), ("POST", "/api/dlq/resend")})



@dataclass(frozen=True, slots=True)
class Caller:
    """Who a request acts for (None: the dashboard has no login) and the admin client signed
    with that account."""

    actor: Actor | None
    admin: AsyncAdminClient


Endpoint = Callable[[Request, Caller], Awaitable[Any]]


def page_of(items: list[Any], offset: int, limit: int) -> tuple[list[Any], int, int]:
    """Clamp the window to the list: (items, offset, limit) of the page actually served."""
    limit = max(1, min(limit, MAX_PAGE))
    offset = max(0, min(offset, max(len(items) - 1, 0)))
    return items[offset : offset + limit], offset, limit


async def _connections(admin: AsyncAdminClient, group: str) -> ConsumerConnections | None:
    try:
        return await admin.consumer_connections(group)
    except FerryMQError:  # the list still shows the group, without its consumers
        return None


async def _consume_tps(admin: AsyncAdminClient) -> dict[str, float]:
    """group -> messages delivered per second over the last minute, summed over its topics and
    the masters: one brokerConsumeStats per master for the whole list."""
    out: dict[str, float] = {}
    for stats in await asyncio.gather(*(admin.broker_consume_stats(a) for a in (await admin.brokers()).values()),
                                      return_exceptions=True):
        if isinstance(stats, BaseException):
            continue
        for s in stats.stats:
            out[s.group] = out.get(s.group, 0.0) + s.consume_tps
    return out


def topic_kind(topic: str, reserved_names: frozenset[str]) -> str:
    if is_retry_topic(topic):
        return "retry"
    if is_dlq_topic(topic):
        return "dlq"
    if is_reserved_topic(topic, *reserved_names):
        return "system"
    return "normal"


class DashboardApi:
    def __init__(self, clients: AccountClients, sampler: LagSampler, namesrv: str) -> None:
        self.clients = clients
        self.sampler = sampler
        self.namesrv = namesrv
        self.routes: dict[tuple[str, str], Endpoint] = {
            ("GET", "/api/overview"): self.overview,
            ("GET", "/api/cluster"): self.cluster,
            ("GET", "/api/topics"): self.topics,
            ("POST", "/api/topics"): self.create_topic,
            ("GET", "/api/topic"): self.topic,
            ("GET", "/api/topic/messages"): self.topic_messages,
            ("GET", "/api/groups"): self.groups,
            ("GET", "/api/group"): self.group,
            ("GET", "/api/message"): self.message,
            ("GET", "/api/messages"): self.messages_by_key,
            ("GET", "/api/dlq"): self.dlq_list,
            ("POST", "/api/dlq/resend"): self.dlq_resend,
        }

    async def handle(self, request: Request, actor: Actor | None = None) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        endpoint = self.routes.get((method, request.path))
        if endpoint is None:
            if any(path == request.path for _, path in self.routes):
                raise HttpError(405, f"{request.method} is not allowed on {request.path}")
            raise HttpError(404, f"no endpoint {request.path}")
        if actor is not None and not actor.admin and (method, request.path) in ADMIN_ONLY:
            raise HttpError(403, f"{request.method} {request.path} needs an admin account; "
                                 f"{actor.access_key} is not one", "AccessDenied")
        try:
            return Response.json(await endpoint(request, Caller(actor, self.clients.admin(actor))))
        except HttpError:  # a FerryMQError too, but it carries its own status
            raise
        except NoPermissionError as exc:  # the broker's ACL refused the caller's account
            return Response.error(403, str(exc), type(exc).__name__)
        except NoRouteError as exc:
            return Response.error(404, str(exc), type(exc).__name__)
        except (ValueError, KeyError) as exc:  # bad input: names, ids, numbers
            return Response.error(400, str(exc), type(exc).__name__)
        except (FerryMQError, OSError, TimeoutError) as exc:
            return Response.error(502, str(exc) or type(exc).__name__, type(exc).__name__)

    # --- cluster -----------------------------------------------------------------------------
    async def overview(self, request: Request, caller: Caller) -> dict[str, Any]:
        return {"namesrv": self.namesrv, "sampler": self.sampler.status()}

    async def cluster(self, request: Request, caller: Caller) -> dict[str, Any]:
        brokers = await caller.admin.cluster_list()
        return {"namesrv": self.namesrv, "brokers": [b.to_json() for b in brokers]}

    # --- topics ------------------------------------------------------------------------------
    async def _reserved_names(self, admin: AsyncAdminClient) -> frozenset[str]:
        """Broker and cluster names: the name server lists them as topics."""
        info = await admin.api.cluster_info()
        return frozenset(str(n) for n in (info.get("brokerAddrTable") or {})) | frozenset(
            str(c) for c in (info.get("clusterAddrTable") or {})
        )

    async def topics(self, request: Request, caller: Caller) -> dict[str, Any]:
        """One page of the topic list, filtered by substring and kind, each topic with its
        queue count and message totals when `stats` is not 0."""
        names, reserved = await asyncio.gather(caller.admin.topic_list(), self._reserved_names(caller.admin))
        query = request.query.get("q", "").strip().lower()
        kind = request.query.get("kind", "normal")
        rows = [{"name": t, "kind": topic_kind(t, reserved)} for t in names]
        counts: dict[str, int] = {}
        for r in rows:
            counts[r["kind"]] = counts.get(r["kind"], 0) + 1
        rows = [r for r in rows if (kind == "all" or r["kind"] == kind) and query in r["name"].lower()]
        page, offset, limit = page_of(rows, request.int_arg("offset", 0), request.int_arg("limit", 50))
        if request.query.get("stats", "1") != "0":
            await self._add_stats(caller.admin, page)
        return {"total": len(rows), "offset": offset, "limit": limit, "kinds": counts, "topics": page}

    async def _add_stats(self, admin: AsyncAdminClient, rows: list[dict[str, Any]]) -> None:
        limit = asyncio.Semaphore(STATUS_FANOUT)

        async def one(row: dict[str, Any]) -> None:
            async with limit:
                try:
                    queues = await admin.topic_status(row["name"])
                    types = await admin.topic_message_types(row["name"])
                except (FerryMQError, OSError, TimeoutError) as exc:
                    row["error"] = str(exc)
                    return
            # RocketMQ 5's message type (one per broker; they agree unless created apart).
            row["type"] = ", ".join(sorted(set(types.values())))
            row["queues"] = len(queues)
            row["brokers"] = sorted({q.broker for q in queues})
            row["messages"] = sum(q.max_offset - q.min_offset for q in queues)
            row["max_offset"] = sum(q.max_offset for q in queues)
            row["last_update"] = max((q.last_update for q in queues), default=0)

        await asyncio.gather(*(one(r) for r in rows))

    async def topic(self, request: Request, caller: Caller) -> dict[str, Any]:
        name = request.arg("name")
        route = await caller.admin.topic_route(name, refresh=True)
        queues = await caller.admin.topic_status(name)
        types = await caller.admin.topic_message_types(name)
        lists = await asyncio.gather(*(caller.admin.api.topic_consumed_by(a, name) for a in route.brokers.values()))
        return {
            "name": name,
            "brokers": dict(route.brokers),
            "queue_datas": [
                {"broker": q.broker_name, "read_queues": q.read_queue_nums, "write_queues": q.write_queue_nums,
                 "perm": q.perm}
                for q in route.queue_datas
            ],
            # Each row as `ferrymq topic status --json` prints it.
            "queues": [{**q.to_json(), "message_type": types.get(q.broker)} for q in queues],
            "message_type": ", ".join(sorted(set(types.values()))),
            "groups": sorted({g for names in lists for g in names}),
        }

    async def topic_messages(self, request: Request, caller: Caller) -> dict[str, Any]:
        name = request.arg("name")
        limit = max(1, min(request.int_arg("limit", 20), MAX_LATEST))
        found = await messages.latest(caller.admin, name, limit)
        return {"topic": name, "messages": [messages.detail_json(m) for m in found]}

    async def create_topic(self, request: Request, caller: Caller) -> dict[str, Any]:
        body = request.json()
        name = str(body.get("name") or "").strip()
        if not name:
            raise ValueError("a topic name is required")
        queues = int(body.get("queues", 4))
        if not 1 <= queues <= 1024:
            raise ValueError(f"queues must be 1 to 1024, got {queues}")
        perm = PERM_READ | PERM_WRITE
        if body.get("perm") is not None:
            perm = int(body["perm"])
        cluster = str(body["cluster"]) if body.get("cluster") else None
        message_type = str(body["message_type"]) if body.get("message_type") else None
        if message_type is not None and message_type not in topic_types.TOPIC_TYPES:
            raise ValueError(f"message_type must be one of {', '.join(topic_types.TOPIC_TYPES)}, got {message_type}")
        if body.get("order") and message_type is None:
            message_type = topic_types.FIFO  # an ordered topic is RocketMQ 5's FIFO type
        brokers = await caller.admin.create_topic(name, queues, perm=perm, order=bool(body.get("order")),
                                                cluster=cluster, message_type=message_type)
        return {"topic": name, "queues": queues, "brokers": brokers}

    # --- groups ------------------------------------------------------------------------------
    async def groups(self, request: Request, caller: Caller) -> dict[str, Any]:
        """Consumer groups with their latest sampled lag; the list itself is read live."""
        names = await caller.admin.consumer_groups()
        query = request.query.get("q", "").strip().lower()
        names = [g for g in names if query in g.lower()]
        page, offset, limit = page_of(names, request.int_arg("offset", 0), request.int_arg("limit", 100))
        conns, tps = await asyncio.gather(
            asyncio.gather(*(_connections(caller.admin, g) for g in page)), _consume_tps(caller.admin))
        rows = []
        for g, online in zip(page, conns, strict=True):
            latest = self.sampler.history.latest(g)
            rows.append({"name": g, "lag": None if latest is None else latest.lag,
                         "retry_lag": None if latest is None else latest.retry_lag,
                         "sampled": None if latest is None else latest.timestamp_ms,
                         # Online consumers and their model (RocketMQ's console lists both);
                         # the model is unknown while none is online.
                         "consumers": len(online.connections) if online else 0,
                         "message_model": (online.message_model or None) if online else None,
                         "consume_tps": round(tps.get(g, 0.0), 2)})
        return {"total": len(names), "offset": offset, "limit": limit, "groups": rows,
                "sampler": self.sampler.status()}

    async def group(self, request: Request, caller: Caller) -> dict[str, Any]:
        name = request.arg("name")
        progress, conns, table = await asyncio.gather(caller.admin.group_progress(name),
                                                      caller.admin.consumer_connections(name),
                                                      caller.admin.subscription_groups())
        return {
            "name": name,
            "lag": sum(r.lag for r in progress),
            "progress": [r.to_json() for r in progress],
            "connections": conns.to_json(),
            # The group's subscription group entry on each master (`ferrymq group list`).
            "settings": [s.to_json() for s in table if s.group == name],
            "history": [s.to_json() for s in self.sampler.history.series(name)],
            "retry_topic": retry_topic(name),
            "dlq_topic": dlq_topic(name),
        }

    # --- messages ----------------------------------------------------------------------------
    async def message(self, request: Request, caller: Caller) -> dict[str, Any]:
        msg_id = request.arg("id").strip()
        msg = await messages.lookup(caller.admin, msg_id, request.query.get("topic") or None)
        return {"message": messages.detail_json(msg), "trace": await messages.trace(caller.admin, msg)}

    async def messages_by_key(self, request: Request, caller: Caller) -> dict[str, Any]:
        topic, key = request.arg("topic").strip(), request.arg("key").strip()
        limit = max(1, min(request.int_arg("limit", 32), 64))
        found = await caller.admin.query_message(topic, key, max_num=limit)
        return {"topic": topic, "key": key, "messages": [messages.detail_json(m) for m in found]}

    # --- dead letters ------------------------------------------------------------------------
    async def dlq_list(self, request: Request, caller: Caller) -> dict[str, Any]:
        group = request.arg("group").strip()
        limit = max(1, min(request.int_arg("limit", 500), 5000))
        entries, _ = await dlq.pending(caller.admin, group, limit=limit + 1)
        return {"group": group, "topic": dlq_topic(group), "truncated": len(entries) > limit,
                "messages": [dlq.entry_json(e) for e in entries[:limit]]}

    async def dlq_resend(self, request: Request, caller: Caller) -> dict[str, Any]:
        body = request.json()
        group = str(body.get("group") or "").strip()
        if not group:
            raise ValueError("a group is required")
        ids = body.get("msg_ids")
        if body.get("all"):
            wanted = None
        elif isinstance(ids, list) and ids:
            wanted = {str(i) for i in ids}
        else:
            raise ValueError("give msg_ids (a non-empty list) or all: true")
        return await dlq.resend(caller.admin, await self.clients.producer(caller.actor), group, wanted)
