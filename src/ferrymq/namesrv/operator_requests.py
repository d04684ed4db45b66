"""The name server's operator requests besides routes: the KV config (PUT/GET/DELETE_KV_CONFIG,
GET_KVLIST_BY_NAMESPACE) and taking a broker out of writes and back
(WIPE_WRITE_PERM_OF_BROKER / ADD_WRITE_PERM_OF_BROKER), with RocketMQ's header fields."""

from __future__ import annotations

import logging

from ..common import jsonx
from ..common.codes import RequestCode, ResponseCode
from ..common.headers import fields, req_str
from ..remoting import Connection, RemotingCommand, RemotingServer
from .kvconfig import KvConfig
from .routes import RouteRegistry

log = logging.getLogger("ferrymq.namesrv")


class OperatorRequests:
    def __init__(self, registry: RouteRegistry, kv: KvConfig) -> None:
        self.registry = registry
        self.kv = kv

    def install(self, server: RemotingServer) -> None:
        server.register(RequestCode.PUT_KV_CONFIG, self._put_kv)
        server.register(RequestCode.GET_KV_CONFIG, self._get_kv)
        server.register(RequestCode.DELETE_KV_CONFIG, self._delete_kv)
        server.register(RequestCode.GET_KVLIST_BY_NAMESPACE, self._kv_list)
        server.register(RequestCode.WIPE_WRITE_PERM_OF_BROKER, self._wipe_write_perm)
        server.register(RequestCode.ADD_WRITE_PERM_OF_BROKER, self._add_write_perm)

    async def _put_kv(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        ext = req.ext_fields
        namespace, key = req_str(ext, "namespace"), req_str(ext, "key")
        # RocketMQ's PutKVConfigRequestHeader requires a value; an empty one is a value too.
        value = ext.get("value")
        if value is None:
            return RemotingCommand.make_response_to(
                req, ResponseCode.INVALID_PARAMETER, remark="the header field value is missing")
        self.kv.put(namespace, key, value)
        log.info("KV config put: %s %s=%s", namespace, key, value)
        return RemotingCommand.make_response_to(req, ResponseCode.SUCCESS)

    async def _get_kv(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        namespace, key = req_str(req.ext_fields, "namespace"), req_str(req.ext_fields, "key")
        value = self.kv.get(namespace, key)
        if value is None:
            return RemotingCommand.make_response_to(
                req, ResponseCode.QUERY_NOT_FOUND,
                remark=f"No config item, Namespace: {namespace} Key: {key}")
        return RemotingCommand.make_response_to(req, ResponseCode.SUCCESS, ext_fields=fields(value=value))

    async def _delete_kv(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        namespace, key = req_str(req.ext_fields, "namespace"), req_str(req.ext_fields, "key")
        # RocketMQ answers SUCCESS whether or not the key was there.
        if self.kv.delete(namespace, key):
            log.info("KV config deleted: %s %s", namespace, key)
        return RemotingCommand.make_response_to(req, ResponseCode.SUCCESS)

    async def _kv_list(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        namespace = req_str(req.ext_fields, "namespace")
        table = self.kv.namespace(namespace)
        if not table:
            return RemotingCommand.make_response_to(
                req, ResponseCode.QUERY_NOT_FOUND, remark=f"No config item, Namespace: {namespace}")
        return RemotingCommand.make_response_to(
            req, ResponseCode.SUCCESS, body=jsonx.dumps_bytes({"table": table}))

    async def _wipe_write_perm(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        name = req_str(req.ext_fields, "brokerName")
        count = self.registry.wipe_write_perm(name)
        log.warning("broker %s taken out of writes (%d topic(s))", name, count)
        return RemotingCommand.make_response_to(
            req, ResponseCode.SUCCESS, ext_fields=fields(wipeTopicCount=count))

    async def _add_write_perm(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        name = req_str(req.ext_fields, "brokerName")
        count = self.registry.add_write_perm(name)
        log.warning("broker %s takes writes again (%d topic(s))", name, count)
        return RemotingCommand.make_response_to(
            req, ResponseCode.SUCCESS, ext_fields=fields(addTopicCount=count))
