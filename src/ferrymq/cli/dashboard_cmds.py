"""`ferrymq dashboard`: the web dashboard, a client of the cluster (docs/dashboard.md)."""

from __future__ import annotations

import argparse

from .auth import credentials


def cmd_dashboard(args: argparse.Namespace) -> int:
    from ..dashboard.server import DashboardConfig, run_dashboard

    if args.lag_interval <= 0 or args.lag_history <= 0:
        raise ValueError("--lag-interval and --lag-history must be positive")
    return run_dashboard(DashboardConfig(
        namesrv=args.namesrv,
        host=args.host,
        port=args.port,
        lag_interval=args.lag_interval,
        lag_history=args.lag_history,
        https_cert=args.https_cert or "",
        https_key=args.https_key or "",
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
    p.set_defaults(func=cmd_dashboard)
