"""A broker's role in its replication group: given by its configuration, or in controller mode
by the controller's answers (failover.py); replication.py acts on it."""

MASTER = "master"
SLAVE = "slave"
UNDECIDED = "undecided"  # controller mode, before the controller has answered
