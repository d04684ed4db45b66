"""`ferrymq` entry point: server commands here, client commands from client_cmds."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import NoReturn, cast

from .. import __version__
from ..broker.config import BrokerConfig, ConfigError, load_config
from ..proxy.defaults import ROUTE_REFRESH_S, SEND_ISOLATION_S
from .failures import EXIT_USAGE, Failure, report
from .tls_flags import add_tls_server_flags, tls_server_overrides


class Parser(argparse.ArgumentParser):
    """Usage errors exit 2 as argparse's do; with --json on the command line the error is the
    same JSON object a runtime failure prints."""

    json_errors = False

    def error(self, message: str) -> NoReturn:
        if Parser.json_errors:
            report(Failure("UsageError", f"{self.prog}: {message}", EXIT_USAGE), as_json=True)
            self.exit(EXIT_USAGE)
        super().error(message)


def _add_broker_flags(p: argparse.ArgumentParser, *, standalone: bool) -> None:
    p.add_argument("--config", type=Path, help="TOML file with broker keys (broker.conf names in snake_case)")
    p.add_argument("--store-dir", type=Path, help="where the store lives (default ./ferrymq-data)")
    p.add_argument("--host", help="address to listen on and advertise (default 127.0.0.1)")
    p.add_argument("--broker-port", type=int, help="broker port, 0 picks a free one (default 10911)")
    p.add_argument("--flush", choices=["async", "sync"], help="flush disk type (default async)")
    p.add_argument("--message-delay-level", help='delay levels, e.g. "1s 5s 10s 30s 1m"')
    p.add_argument("--max-reconsume-times", type=int, help="sends back before a message is dead-lettered")
    p.add_argument("--broker-name", help="broker name (default broker-a)")
    p.add_argument("--ha-port", type=int,
                   help="replication port, 0 picks a free one (default: broker port + 1)")
    p.add_argument("--grpc-port", type=int,
                   help="gRPC port for RocketMQ 5 clients (apache.rocketmq.v2), 0 picks a free one, "
                        "-1 turns it off (default 8081; a free one with --broker-port 0)")
    _add_metrics_flag(p)
    p.add_argument("--acl-file", help="RocketMQ's plain_acl.yml: requests must be signed by its accounts "
                   "(hot-reloaded; see docs/security.md)")
    add_tls_server_flags(p)
    if standalone:
        p.add_argument("--namesrv-port", type=int, default=9876, help="name server port, 0 picks a free one")
    else:
        p.add_argument("--namesrv", default=os.environ.get("FERRYMQ_NAMESRV", "127.0.0.1:9876"),
                       help="name server address(es), ';'-separated")
        p.add_argument("--role", choices=["ASYNC_MASTER", "SYNC_MASTER", "SLAVE"],
                       help="replication role (default ASYNC_MASTER); see docs/replication.md")
        p.add_argument("--broker-id", type=int,
                       help="0 for a master, 1.. for slaves; replica id >= 1 with --controller")
        p.add_argument("--master-ha-addr", help="a slave's master replication address "
                       "(default: learnt from the name server)")
        p.add_argument("--controller", help="controller mode: the controller's address "
                       "(a name server run with --enable-controller)")
        p.add_argument("--tls", action="store_true", default=None,
                       help="connect to the name server (and a slave to its master) over TLS, "
                            "checking certificates against --tls-ca")


def _port_number(text: str) -> int:
    """A port to listen on, 0 a free one: argparse would take 70000, and the servers listen on
    it modulo 65536 (4464) without a word."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number (0-65535, 0 picks a free one): {value}")
    return value


def _add_metrics_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metrics-port", type=_port_number, default=None,
                   help="serve Prometheus metrics on http://HOST:PORT/metrics, 0 picks a free port "
                        "(default: off; docs/metrics.md)")


def _broker_config(args: argparse.Namespace, *, standalone: bool) -> BrokerConfig:
    flush = {"async": "ASYNC_FLUSH", "sync": "SYNC_FLUSH"}.get(args.flush or "")
    overrides = {
        "store_dir": args.store_dir,
        "host": args.host,
        "listen_port": args.broker_port,
        "flush_disk_type": flush,
        "message_delay_level": args.message_delay_level,
        "max_reconsume_times": args.max_reconsume_times,
        "broker_name": args.broker_name,
        "ha_listen_port": args.ha_port,
        "grpc_listen_port": args.grpc_port,
        "acl_file": args.acl_file,
        # Where a runtime `broker config update` is written back (GET_BROKER_CONFIG shows it).
        "broker_config_path": str(args.config.resolve()) if args.config else None,
    }
    overrides.update(tls_server_overrides(args))
    if args.tls_ca:
        overrides["tls_client_trust_cert_path"] = args.tls_ca
    if not standalone:
        overrides.update(namesrv_addr=args.namesrv, broker_role=args.role, broker_id=args.broker_id,
                         ha_master_address=args.master_ha_addr, controller_addr=args.controller,
                         tls_enable=args.tls)
    cfg = load_config(args.config, **overrides)
    if standalone and cfg.tls_server().enabled:
        # The broker registers with the name server of its own process, which may refuse plain
        # connections; without a CA to check against, the loopback peer is itself.
        cfg = cfg.replace(tls_enable=True, tls_client_auth_server=bool(cfg.tls_client_trust_cert_path),
                          tls_client_cert_path=cfg.tls_server_cert_path,
                          tls_client_key_path=cfg.tls_server_key_path)
    return cfg


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="ferrymq", description="RocketMQ's messaging model in Python")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    parser.add_argument("--version", action="version", version=f"ferrymq {__version__}")
    # Parser is an ArgumentParser; the command modules take the general type.
    sub = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(dest="command", metavar="COMMAND"),
    )
    sub.required = True

    p = sub.add_parser("standalone", help="name server and broker in one process")
    _add_broker_flags(p, standalone=True)
    p.set_defaults(func=_cmd_standalone)

    p = sub.add_parser(
        "namesrv", help="run a name server; or `namesrv config|kv`",
        # Its actions' flags (--namesrv) must not be taken for prefixes of the server flags.
        allow_abbrev=False,
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9876)
    p.add_argument("--enable-controller", action="store_true",
                   help="also run the controller that picks each broker group's master (controller mode)")
    # None when not given: a controller flag without --enable-controller is refused, not ignored.
    p.add_argument("--controller-dir", default=None,
                   help="where the controller keeps its state (default: ./ferrymq-controller)")
    p.add_argument("--controller-lease-ms", type=_positive_int, default=None,
                   help="a master silent this long is replaced (default 3000)")
    p.add_argument("--controller-scan-interval-ms", type=_positive_int, default=None,
                   help="how often the controller looks for expired masters (default 500)")
    p.add_argument("--controller-etcd", default="", metavar="URLS",
                   help="quorum mode: the etcd endpoints (comma-separated) several name servers' "
                   "controllers agree through; one of them leads (docs/replication.md)")
    p.add_argument("--controller-etcd-lease-s", type=_positive_int, default=None,
                   help="quorum mode: the leader's etcd lease; a dead leader is replaced after it (default 2)")
    p.add_argument("--acl-file", type=Path, help="plain_acl.yml: broker registrations must be signed by "
                   "one of its admin accounts (see docs/security.md)")
    _add_metrics_flag(p)
    add_tls_server_flags(p)
    p.add_argument("--kv-config", type=Path, help="where the KV config is kept (RocketMQ's kvConfigPath; "
                   "default: in memory only)")
    p.set_defaults(func=_cmd_namesrv)
    namesrv_parser = p

    p = sub.add_parser(
        "broker",
        help="run a broker that registers with a name server; or `broker status|config`",
        # Its actions take --broker, which the server flags' prefixes must not swallow.
        allow_abbrev=False,
    )
    _add_broker_flags(p, standalone=False)
    p.set_defaults(func=_cmd_broker)
    broker_parser = p

    p = sub.add_parser(
        "proxy", help="RocketMQ 5's proxy (cluster mode): one gRPC endpoint for every broker "
        "group registered with the name server",
        # Laid out by hand: wrapped, the ready line would break across lines.
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "RocketMQ 5's proxy in cluster mode: serves apache.rocketmq.v2 (the protocol of\n"
            "RocketMQ 5's gRPC SDKs) for every broker group registered with the name server,\n"
            "reaching the brokers over remoting. It keeps no state of its own (routes come\n"
            "from the name server, everything else lives in the brokers), so several proxies\n"
            "behind one address serve the same clients (docs/grpc.md, \"The proxy\").\n"
            "\n"
            "Ready line: proxy grpc=HOST:PORT (then metrics=HOST:PORT with --metrics-port)"))
    p.add_argument("--namesrv", default=os.environ.get("FERRYMQ_NAMESRV", "127.0.0.1:9876"),
                   help="name server address(es), ';'-separated (default $FERRYMQ_NAMESRV, else 127.0.0.1:9876)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on and advertise (default 127.0.0.1)")
    p.add_argument("--grpc-port", type=_port_number, default=8081,
                   help="gRPC port for RocketMQ 5 clients, 0 picks a free one (default 8081)")
    _add_metrics_flag(p)
    p.add_argument("--acl-file", type=Path, help="RocketMQ's plain_acl.yml: the SDKs' calls must be signed by its "
                   "accounts; its first admin account signs the proxy's requests to the brokers")
    p.add_argument("--access-key", default=os.environ.get("FERRYMQ_ACCESS_KEY", ""),
                   help="sign the proxy's requests to the brokers with this account instead")
    p.add_argument("--secret-key", default=os.environ.get("FERRYMQ_SECRET_KEY", ""))
    p.add_argument("--send-isolation", type=_seconds, default=SEND_ISOLATION_S, metavar="SECONDS",
                   help="how long sends pass over a broker group whose master did not answer one, while "
                   f"another group has a writable queue; 0 never passes over (default {SEND_ISOLATION_S:g})")
    p.add_argument("--route-refresh", type=_seconds, default=ROUTE_REFRESH_S, metavar="SECONDS",
                   help="how long a topic's route is used before the name server is asked again, in the "
                   f"background while the route in hand serves (default {ROUTE_REFRESH_S:g})")
    add_tls_server_flags(p)
    p.add_argument("--tls", action="store_true", default=None,
                   help="connect to the name server and brokers over TLS, checking certificates against --tls-ca")
    p.set_defaults(func=_cmd_proxy)

    from .client_cmds import add_client_commands, common_options, wrap
    from .cluster_cmds import add_broker_actions

    for action in add_broker_actions(broker_parser, common_options()):
        wrap(action)
    from .namesrv_cmds import add_namesrv_actions

    for action in add_namesrv_actions(namesrv_parser, common_options()):
        wrap(action)
    add_client_commands(sub)
    return parser


def _cmd_standalone(args: argparse.Namespace) -> int:
    from ..server_main import run_standalone

    return run_standalone(_broker_config(args, standalone=True), args.namesrv_port, args.metrics_port)


def _cmd_namesrv(args: argparse.Namespace) -> int:
    from ..namesrv import NamesrvConfig
    from ..server_main import run_namesrv

    given = {k: v for k, v in tls_server_overrides(args).items() if v is not None}
    tls = BrokerConfig().replace(**given).validate().tls_server()
    flags = [flag for flag, value in (("--controller-dir", args.controller_dir),
                                      ("--controller-lease-ms", args.controller_lease_ms),
                                      ("--controller-scan-interval-ms", args.controller_scan_interval_ms))
             if value is not None]
    if flags and not args.enable_controller:
        print(f"ferrymq: cannot start: {flags[0]}: needs --enable-controller (it sets the controller, which "
              "runs only with that flag)", file=sys.stderr)
        return 1
    d = NamesrvConfig()
    return run_namesrv(NamesrvConfig(
        tls=tls,
        host=args.host,
        port=args.port,
        enable_controller=args.enable_controller,
        controller_dir=d.controller_dir if args.controller_dir is None else Path(args.controller_dir),
        controller_lease_ms=d.controller_lease_ms if args.controller_lease_ms is None else args.controller_lease_ms,
        controller_scan_interval_ms=(d.controller_scan_interval_ms if args.controller_scan_interval_ms is None
                                     else args.controller_scan_interval_ms),
        controller_etcd=args.controller_etcd,
        controller_etcd_lease_s=args.controller_etcd_lease_s,
        acl_file=args.acl_file,
        kv_config_path=args.kv_config,
    ), args.metrics_port)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0 or value == float("inf"):  # NaN fails the first test
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0: {text}")
    return value


def _cmd_proxy(args: argparse.Namespace) -> int:
    from ..proxy.server import ProxyConfig
    from ..server_main import run_proxy

    given = {k: v for k, v in tls_server_overrides(args).items() if v is not None}
    if args.tls_ca:
        given["tls_client_trust_cert_path"] = args.tls_ca
    cfg = BrokerConfig().replace(tls_enable=bool(args.tls), **given).validate()
    return run_proxy(ProxyConfig(
        namesrv=args.namesrv, host=args.host, grpc_port=args.grpc_port, metrics_port=args.metrics_port,
        acl_file=args.acl_file, access_key=args.access_key, secret_key=args.secret_key,
        tls_server=cfg.tls_server(), tls_client=cfg.tls_client(), send_isolation_s=args.send_isolation,
        route_refresh_s=args.route_refresh))


def _cmd_broker(args: argparse.Namespace) -> int:
    from ..server_main import run_broker

    return run_broker(_broker_config(args, standalone=False), args.metrics_port)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    Parser.json_errors = "--json" in (sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    # Servers log their life at INFO; a client command's stderr is for its own error message.
    server = args.command in ("standalone", "namesrv", "broker", "proxy", "dashboard") and not (
        getattr(args, "broker_command", None) or getattr(args, "namesrv_command", None)
    )
    quiet = logging.INFO if server else logging.ERROR
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else quiet,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"ferrymq: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
