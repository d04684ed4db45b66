"""Controller requests on the name server's port (BROKER_HEARTBEAT, CONTROLLER_ALTER_SYNC_STATE_SET,
CONTROLLER_GET_REPLICA_INFO): JSON bodies decoded into typed values, answered from the
ReplicaController, and master changes applied to the routes."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from ..common import jsonx
from ..common.codes import CONTROLLER_LEADER_FIELD, RequestCode, ResponseCode
from ..common.headers import fields, req_int, req_str
from ..remoting import Connection, RemotingCommand, RemotingServer
from .controller import (
    ControllerError,
    ControllerNotLeader,
    ElectionRefused,
    FencedMasterEpoch,
    FencedSyncStateSetEpoch,
    Heartbeat,
    InvalidControllerRequest,
    MasterChange,
    ReplicaController,
)
from .etcd import EtcdUnavailableError
from .quorum import EtcdQuorum
from .routes import RouteRegistry

log = logging.getLogger("ferrymq.namesrv.controller")
T = TypeVar("T")


def decode_body(body: bytes | None) -> dict[str, Any]:
    if not body:
        raise InvalidControllerRequest("the request has no JSON body")
    try:
        doc = jsonx.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidControllerRequest(f"the body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidControllerRequest("the body must be a JSON object")
    return doc


def _str(doc: Mapping[str, Any], key: str) -> str:
    v = doc.get(key)
    if not isinstance(v, str) or not v:
        raise InvalidControllerRequest(f"{key} must be a non-empty string, got {v!r}")
    return v


def _int(doc: Mapping[str, Any], key: str) -> int:
    v = doc.get(key)
    if isinstance(v, bool) or not isinstance(v, int):
        raise InvalidControllerRequest(f"{key} must be an integer, got {v!r}")
    return v


def decode_heartbeat(doc: Mapping[str, Any]) -> Heartbeat:
    return Heartbeat(
        cluster_name=_str(doc, "clusterName"),
        broker_name=_str(doc, "brokerName"),
        broker_id=_int(doc, "brokerId"),
        broker_addr=_str(doc, "brokerAddr"),
        ha_addr=_str(doc, "haAddr"),
        max_offset=_int(doc, "maxOffset"),
        epoch=_int(doc, "epoch"),
    )


def decode_id_list(doc: Mapping[str, Any], key: str) -> list[int]:
    v = doc.get(key)
    if not isinstance(v, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in v):
        raise InvalidControllerRequest(f"{key} must be a list of replica ids, got {v!r}")
    return list(v)


_CODES = {
    FencedMasterEpoch: ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
    FencedSyncStateSetEpoch: ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
    ControllerNotLeader: ResponseCode.CONTROLLER_NOT_LEADER,
    ElectionRefused: ResponseCode.CONTROLLER_ELECT_MASTER_FAILED,
}


def _refusal(req: RemotingCommand, exc: ControllerError) -> RemotingCommand:
    code = _CODES.get(type(exc), ResponseCode.CONTROLLER_INVALID_REQUEST)
    if isinstance(exc, ControllerNotLeader) and exc.leader_addr:
        return RemotingCommand.make_response_to(req, code, remark=exc.remark,
                                                ext_fields={CONTROLLER_LEADER_FIELD: exc.leader_addr})
    return RemotingCommand.make_response_to(req, code, remark=exc.remark)


def _answer(req: RemotingCommand, doc: dict[str, Any]) -> RemotingCommand:
    return RemotingCommand.make_response_to(req, ResponseCode.SUCCESS, body=jsonx.dumps_bytes(doc))


class ControllerApi:
    def __init__(self, controller: ReplicaController, registry: RouteRegistry,
                 quorum: EtcdQuorum | None = None) -> None:
        """With a `quorum` only its leader answers and changes the state (quorum.py)."""
        self.controller = controller
        self.registry = registry
        self.quorum = quorum

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self.quorum is None:
            return fn(*args)
        return await self.quorum.call(fn, *args)

    def install(self, server: RemotingServer) -> None:
        server.register(RequestCode.BROKER_HEARTBEAT, self._heartbeat)
        server.register(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, self._alter_sync_state_set)
        server.register(RequestCode.CONTROLLER_GET_REPLICA_INFO, self._replica_info)
        server.register(RequestCode.CONTROLLER_ELECT_MASTER, self._elect_master)

    def apply(self, changes: Iterable[MasterChange]) -> None:
        """An old master leaves the route at once, so clients stop sending to it."""
        for c in changes:
            if c.old_master_addr:
                self.registry.drop_master(c.broker_name, c.old_master_addr)
            if c.old_master_id != -1 or c.new_master_id == -1:
                log.warning(
                    "broker group %s: master %d (%s) replaced by %d (%s) at epoch %d",
                    c.broker_name, c.old_master_id, c.old_master_addr or "-",
                    c.new_master_id, c.new_master_addr or "none", c.epoch,
                )

    def scan(self) -> None:
        self.apply(self.controller.scan())

    async def tick(self) -> None:
        """The periodic scan; in quorum mode only the leader's elects."""
        if self.quorum is None:
            self.scan()
        elif self.quorum.leading():
            with contextlib.suppress(ControllerNotLeader):
                self.apply(await self.quorum.call(self.controller.scan))

    def _follow(self) -> None:
        self.apply(self.controller.take_changes())

    def may_register_as_master(self, broker_name: str, broker_addr: str) -> str | None:
        """None when `broker_addr` may register as id 0 of the group, else why not."""
        master = self.controller.master_addr(broker_name)
        if master is None or master == broker_addr:
            return None
        if not master:
            return f"broker group {broker_name!r} has no master; {broker_addr} may not register as broker id 0"
        return f"{broker_addr} is not the master of broker group {broker_name!r} (the master is {master})"

    async def check_master_registration(self, broker_name: str, broker_addr: str) -> str | None:
        """may_register_as_master; a follower of a quorum that would refuse first copies the
        leader's latest state: the new master registers right after its election."""
        refusal = self.may_register_as_master(broker_name, broker_addr)
        if refusal is not None and self.quorum is not None and not self.quorum.leading():
            try:
                await self.quorum.refresh()
            except EtcdUnavailableError as exc:
                log.debug("controller state not refreshed: %s", exc)
            refusal = self.may_register_as_master(broker_name, broker_addr)
        return refusal

    async def _heartbeat(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        try:
            view = await self._call(self.controller.heartbeat, decode_heartbeat(decode_body(req.body)))
        except ControllerError as exc:
            return _refusal(req, exc)
        finally:
            self._follow()
        # The controller's lease rides along: a master must stop taking writes before the
        # controller may elect another, whatever its own configuration says.
        return _answer(req, {**view.to_json(), "leaseMs": self.controller.lease_ms})

    async def _alter_sync_state_set(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        try:
            doc = decode_body(req.body)
            view = await self._call(
                self.controller.alter_sync_state_set,
                _str(doc, "brokerName"),
                _int(doc, "masterId"),
                _int(doc, "epoch"),
                _int(doc, "syncStateSetEpoch"),
                decode_id_list(doc, "syncStateSet"),
            )
        except ControllerError as exc:
            return _refusal(req, exc)
        finally:
            self._follow()
        return _answer(req, view.to_json())

    async def _elect_master(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """RocketMQ's ElectMasterRequestHeader (clusterName, brokerName, brokerId, designateElect)
        and ElectMasterResponseHeader's fields; the body is the group's view as a heartbeat's."""
        ext = req.ext_fields
        try:
            view = await self._call(self.controller.elect, req_str(ext, "brokerName"), req_int(ext, "brokerId"))
        except ControllerError as exc:
            return _refusal(req, exc)
        finally:
            self._follow()
        return RemotingCommand.make_response_to(
            req, ResponseCode.SUCCESS, body=jsonx.dumps_bytes(view.to_json()),
            ext_fields=fields(masterBrokerId=view.master_id, masterAddress=view.master_addr,
                              masterEpoch=view.epoch, syncStateSetEpoch=view.sync_state_set_epoch))

    async def _replica_info(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        try:
            info = await self._call(self.controller.replica_info, _str(decode_body(req.body), "brokerName"))
        except ControllerError as exc:
            return _refusal(req, exc)
        return _answer(req, info)
