"""The cluster clients the dashboard's endpoints use: for a logged-in user, an admin client (and
for DLQ re-drives a producer) signed with that user's own account, so the brokers' ACL decides
what the user may read and do; without login, the dashboard's own."""

from __future__ import annotations

import asyncio
import logging

from ..acl import AclRules
from ..client.admin_async import AsyncAdminClient
from ..client.producer_async import AsyncProducer
from . import dlq
from .gate import Actor

log = logging.getLogger(__name__)

Key = tuple[str | None, str | None]


class AccountClients:
    def __init__(self, namesrv: str, timeout: float, own: AsyncAdminClient, own_key: Key) -> None:
        self.namesrv = namesrv
        self.timeout = timeout
        self.own_key = own_key
        self._admins: dict[Key, AsyncAdminClient] = {own_key: own}
        self._producers: dict[Key, AsyncProducer] = {}
        self._lock = asyncio.Lock()

    @staticmethod
    def key_of(actor: Actor | None, own_key: Key) -> Key:
        return own_key if actor is None else (actor.access_key, actor.secret_key)

    def admin(self, actor: Actor | None) -> AsyncAdminClient:
        key = self.key_of(actor, self.own_key)
        client = self._admins.get(key)
        if client is None:
            client = self._admins[key] = AsyncAdminClient(self.namesrv, timeout=self.timeout,
                                                          access_key=key[0], secret_key=key[1])
        return client

    async def producer(self, actor: Actor | None) -> AsyncProducer:
        key = self.key_of(actor, self.own_key)
        async with self._lock:
            producer = self._producers.get(key)
            if producer is None:
                producer = AsyncProducer(dlq.DASHBOARD_PRODUCER_GROUP, self.namesrv,
                                         access_key=key[0], secret_key=key[1])
                await producer.start()
                self._producers[key] = producer
            return producer

    async def retain(self, rules: AclRules) -> None:
        """Close the clients of accounts the ACL file no longer has, or has with another secret."""
        def live(key: Key) -> bool:
            if key == self.own_key:
                return True
            account = rules.accounts.get(key[0] or "")
            return account is not None and account.secret_key == key[1]

        gone_admins = [self._admins.pop(k) for k in list(self._admins) if not live(k)]
        async with self._lock:
            gone_producers = [self._producers.pop(k) for k in list(self._producers) if not live(k)]
        await self._close(gone_admins, gone_producers)

    async def close(self) -> None:
        """Close every client but the dashboard's own admin client (its owner closes that)."""
        async with self._lock:
            producers = list(self._producers.values())
            self._producers.clear()
        admins = [c for k, c in self._admins.items() if k != self.own_key]
        self._admins = {k: c for k, c in self._admins.items() if k == self.own_key}
        await self._close(admins, producers)

    @staticmethod
    async def _close(admins: list[AsyncAdminClient], producers: list[AsyncProducer]) -> None:
        # A client that fails to close must not keep the others open, nor fail the request or
        # shutdown that closes them.
        for producer in producers:
            try:
                await producer.shutdown()
            except Exception:
                log.warning("closing the DLQ producer of an account failed", exc_info=True)
        for admin in admins:
            try:
                await admin.close()
            except Exception:
                log.warning("closing the admin client of an account failed", exc_info=True)
