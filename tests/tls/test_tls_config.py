"""TLS keys in the broker's TOML: snake_case, RocketMQ's dotted system property names as quoted
keys or as tables; wrong values name their key."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferrymq.broker.config import ConfigError, load_config
from ferrymq.remoting.tls import ClientAuth, TlsMode


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "broker.toml"
    path.write_text(text)
    return path


def test_snake_case_keys(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, 'tls_server_mode = "enforcing"\ntls_server_cert_path = "c.pem"\n'
                                      'tls_server_key_path = "k.pem"\ntls_server_need_client_auth = "require"\n'
                                      'tls_enable = true\ntls_client_trust_cert_path = "ca.pem"\n'))
    server = cfg.tls_server()
    assert server.mode is TlsMode.ENFORCING and server.cert_path == "c.pem" and server.key_path == "k.pem"
    assert server.need_client_auth is ClientAuth.REQUIRE
    client = cfg.tls_client()
    assert client.enabled and client.trust_cert_path == "ca.pem" and client.verify


def test_rocketmq_property_names_quoted_and_as_tables(tmp_path: Path) -> None:
    quoted = load_config(write(tmp_path, '"tls.server.mode" = "permissive"\n"tls.server.certPath" = "c.pem"\n'
                                         '"tls.server.keyPath" = "k.pem"\n"tls.enable" = true\n'))
    assert quoted.tls_server().mode is TlsMode.PERMISSIVE and quoted.tls_enable
    tables = load_config(write(tmp_path, '[broker]\nbroker_name = "b"\n[broker.tls.server]\nmode = "enforcing"\n'
                                         'certPath = "c.pem"\nkeyPath = "k.pem"\n'
                                         '[broker.tls.client]\ntrustCertPath = "ca.pem"\nauthServer = false\n'))
    assert tables.tls_server().mode is TlsMode.ENFORCING and tables.tls_server_cert_path == "c.pem"
    assert tables.tls_client_trust_cert_path == "ca.pem" and not tables.tls_client().verify


def test_wrong_values_name_their_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="tls_server_mode"):
        load_config(write(tmp_path, 'tls_server_mode = "strict"\n'))
    with pytest.raises(ConfigError, match="tls_server_cert_path"):
        load_config(write(tmp_path, 'tls_server_mode = "enforcing"\n'))
    with pytest.raises(ConfigError, match="tls_server_need_client_auth"):
        load_config(write(tmp_path, 'tls_server_need_client_auth = "sometimes"\n'))
