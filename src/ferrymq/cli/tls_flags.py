"""The TLS flags of the server commands and of the client commands (docs/security.md)."""

from __future__ import annotations

import argparse
import os
from typing import Any


def add_tls_server_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tls-mode", choices=["disabled", "permissive", "enforcing"],
                   help="TLS on this server's ports: disabled (default), permissive (TLS and plain "
                        "on the same port) or enforcing (TLS only)")
    p.add_argument("--tls-cert", help="PEM certificate chain of this server (tls.server.certPath)")
    p.add_argument("--tls-key", help="PEM private key of this server (tls.server.keyPath)")
    p.add_argument("--tls-ca", help="PEM CA(s) that client certificates are checked against "
                                    "(tls.server.trustCertPath); a broker also checks the name "
                                    "server's and its master's certificates against it")
    p.add_argument("--tls-need-client-auth", choices=["none", "optional", "require"],
                   help="whether clients must present a certificate (default none)")


def tls_server_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """BrokerConfig keys from the flags given (None: not given, the config file decides)."""
    return {
        "tls_server_mode": args.tls_mode,
        "tls_server_cert_path": args.tls_cert,
        "tls_server_key_path": args.tls_key,
        "tls_server_trust_cert_path": args.tls_ca,
        "tls_server_need_client_auth": args.tls_need_client_auth,
    }


def add_tls_client_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tls", action="store_true", help="connect over TLS (default: $FERRYMQ_TLS)")
    p.add_argument("--tls-ca", help="PEM CA(s) the servers' certificates are checked against "
                                    "(implies --tls; default $FERRYMQ_TLS_CA, else the system's CAs)")
    p.add_argument("--tls-insecure", action="store_true",
                   help="TLS without checking the servers' certificates (tests, closed networks)")


def apply_tls_client_flags(args: argparse.Namespace, environ: dict[str, str] | None = None) -> None:
    """The command's clients read their TLS settings from the environment (FERRYMQ_TLS*), as
    library users' do when they pass none: the flags are written there for this process."""
    env: Any = os.environ if environ is None else environ
    if getattr(args, "tls", False) or getattr(args, "tls_ca", None) or getattr(args, "tls_insecure", False):
        env["FERRYMQ_TLS"] = "1"
    if getattr(args, "tls_ca", None):
        env["FERRYMQ_TLS_CA"] = args.tls_ca
    if getattr(args, "tls_insecure", False):
        env["FERRYMQ_TLS_VERIFY"] = "0"
