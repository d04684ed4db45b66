"""Master/slave replication of the commit log (docs/replication.md)."""

from .master import HaMaster, HaMasterConfig, SyncSetPolicy
from .protocol import HaProtocolError
from .slave import HaSlave, HaSlaveConfig
from .waiters import ReplicaAck

__all__ = ["HaMaster", "HaMasterConfig", "HaProtocolError", "HaSlave", "HaSlaveConfig",
           "ReplicaAck", "SyncSetPolicy"]
