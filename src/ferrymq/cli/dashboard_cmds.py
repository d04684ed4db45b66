"""`ferrymq dashboard`: the web dashboard, a client of the cluster (docs/dashboard.md)."""

from __future__ import annotations

import argparse

from .auth import credentials
from .failures import EXIT_USAGE, CommandFailed


def cmd_dashboard(args: argparse.Namespace) -> int:
    from ..dashboard.server import DashboardConfig, run_dashboard
    from ..dashboard.sessions import SessionPolicy

    if args.lag_interval <= 0 or args.lag_history <= 0:
        raise ValueError("--lag-interval and --lag-history must be positive")
    if args.session_idle <= 0:
        raise ValueError("--session-idle must be positive")
    if args.access_key and not args.acl_file:
        # Signed with an account, the dashboard would act with it for anyone who reaches its port.
        raise CommandFailed("the dashboard signs with --access-key but has no --acl-file to log its "
                            "users in with: give the cluster's plain_acl.yml", kind="UsageError",
                            exit_code=EXIT_USAGE)
    return run_dashboard(DashboardConfig(
        namesrv=args.namesrv,
        host=args.host,
        port=args.port,
        lag_interval=args.lag_interval,
        lag_history=args.lag_history,
        https_cert=args.https_cert or "",
        https_key=args.https_key or "",
        acl_file=args.acl_file or "",
        allow_hosts=tuple(args.allow_host or ()),
        sessions=SessionPolicy(idle=args.session_idle),
        **credentials(args),
    ))


def add(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser(
        "dashboard", parents=[common],
        help="serve the web dashboard (cluster, topics, groups and lag, messages, DLQ)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="HTTP port, 0 picks a free one (default 8080)")
    p.add_argument("--lag-interval", type=float, default=10.0,
                   help="seconds between two samples of every group's lag (default 10)")
    p.add_argument("--lag-history", type=int, default=360,
                   help="samples kept per group for the lag chart (default 360: an hour at 10 s)")
    p.add_argument("--https-cert", help="serve the page over HTTPS with this PEM certificate chain "
                                        "(the cluster itself is reached with --tls/--tls-ca)")
    p.add_argument("--https-key", help="the PEM private key of --https-cert")
    p.add_argument("--acl-file", help="the cluster's plain_acl.yml: every page and call then needs a "
                                      "login with one of its accounts (required with --access-key)")
    p.add_argument("--allow-host", action="append", metavar="NAME",
                   help="a host name the page may be reached by, besides IP addresses and "
                        "localhost (repeatable; e.g. a reverse proxy's name)")
    p.add_argument("--session-idle", type=float, default=3600.0,
                   help="seconds without a request after which a login ends (default 3600)")
    p.set_defaults(func=cmd_dashboard)
