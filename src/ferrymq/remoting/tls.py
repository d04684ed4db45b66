"""TLS settings for servers and clients, after RocketMQ's TlsSystemConfig.

A server runs in one of RocketMQ's three modes: `disabled` (plain only), `permissive` (TLS
and plain on the same port, told apart by the first byte a client sends: 0x16 opens a TLS
handshake, a remoting frame starts with its length) or `enforcing` (TLS only). Clients turn
TLS on per client, or for every client of the process with $FERRYMQ_TLS."""

from __future__ import annotations

import enum
import os
import ssl
from dataclasses import dataclass

from ..common.errors import FerryMQError

# The first byte of a TLS record carrying a handshake (ClientHello).
TLS_HANDSHAKE_BYTE = 0x16


class TlsConfigError(FerryMQError, ValueError):
    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"TLS configuration {key!r}: {reason}")
        self.key = key
        self.reason = reason


class TlsMode(enum.StrEnum):
    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"

    @classmethod
    def parse(cls, text: str) -> TlsMode:
        try:
            return cls(text.strip().lower())
        except ValueError:
            raise TlsConfigError("tls_server_mode", f"{text!r} is not disabled, permissive or enforcing") from None


class ClientAuth(enum.StrEnum):
    """RocketMQ's tls.server.need.client.auth: whether clients must present a certificate."""

    NONE = "none"
    OPTIONAL = "optional"
    REQUIRE = "require"

    @classmethod
    def parse(cls, value: str | bool) -> ClientAuth:
        if isinstance(value, bool):
            return cls.REQUIRE if value else cls.NONE
        try:
            return cls(value.strip().lower())
        except ValueError:
            raise TlsConfigError("tls_server_need_client_auth",
                                 f"{value!r} is not none, optional or require") from None


@dataclass(frozen=True, slots=True)
class TlsServerSettings:
    mode: TlsMode = TlsMode.DISABLED
    cert_path: str = ""  # PEM certificate chain, the server's certificate first
    key_path: str = ""  # PEM private key
    key_password: str = ""
    trust_cert_path: str = ""  # CA(s) client certificates are checked against
    need_client_auth: ClientAuth = ClientAuth.NONE
    # A connection that neither sends its first byte nor completes its handshake in this long
    # is closed: it holds a socket without being a connection the server tracks yet.
    handshake_timeout: float = 10.0

    @property
    def enabled(self) -> bool:
        return self.mode is not TlsMode.DISABLED

    def validate(self) -> TlsServerSettings:
        if self.enabled:
            if not self.cert_path:
                raise TlsConfigError("tls_server_cert_path", f"required with tls_server_mode={self.mode}")
            if not self.key_path:
                raise TlsConfigError("tls_server_key_path", f"required with tls_server_mode={self.mode}")
        if self.handshake_timeout <= 0:
            raise TlsConfigError("handshake_timeout", "must be > 0")
        return self


@dataclass(frozen=True, slots=True)
class TlsClientSettings:
    enabled: bool = False
    # CA(s) the server's certificate must chain to; "" uses the system's trusted CAs.
    trust_cert_path: str = ""
    # RocketMQ's tls.client.authServer. False accepts any certificate (encryption without
    # knowing who is at the other end): for tests and closed networks only.
    verify: bool = True
    cert_path: str = ""  # the client's own certificate, for servers that require one
    key_path: str = ""
    key_password: str = ""

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> TlsClientSettings:
        """$FERRYMQ_TLS (1/true), $FERRYMQ_TLS_CA, $FERRYMQ_TLS_VERIFY (0/false turns the check
        off), $FERRYMQ_TLS_CERT, $FERRYMQ_TLS_KEY."""
        env = os.environ if environ is None else environ
        ca = env.get("FERRYMQ_TLS_CA", "")
        return cls(
            enabled=_truthy(env.get("FERRYMQ_TLS", "")) or bool(ca),
            trust_cert_path=ca,
            verify=not _falsy(env.get("FERRYMQ_TLS_VERIFY", "")),
            cert_path=env.get("FERRYMQ_TLS_CERT", ""),
            key_path=env.get("FERRYMQ_TLS_KEY", ""),
        )


def resolve_client_tls(value: TlsClientSettings | bool | None) -> TlsClientSettings:
    """A client's `tls` option: settings as given, True for TLS with the defaults (the CA from
    $FERRYMQ_TLS_CA if set), False for plain, None for whatever the environment says."""
    if isinstance(value, TlsClientSettings):
        return value
    env = TlsClientSettings.from_env()
    if value is None:
        return env
    return TlsClientSettings(enabled=value, trust_cert_path=env.trust_cert_path, verify=env.verify,
                             cert_path=env.cert_path, key_path=env.key_path)


def _truthy(text: str) -> bool:
    return text.strip().lower() in ("1", "true", "yes", "on")


def _falsy(text: str) -> bool:
    return text.strip().lower() in ("0", "false", "no", "off")


def server_context(settings: TlsServerSettings) -> ssl.SSLContext:
    """Files that are missing or unreadable raise OSError (ssl.SSLError for bad PEM) naming
    what was wrong, at start rather than at the first client."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(ctx, settings.cert_path, settings.key_path, settings.key_password, "tls_server")
    if settings.need_client_auth is not ClientAuth.NONE:
        if settings.trust_cert_path:
            _load_trust(ctx, settings.trust_cert_path, "tls_server_trust_cert_path")
        else:
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        ctx.verify_mode = (ssl.CERT_REQUIRED if settings.need_client_auth is ClientAuth.REQUIRE
                           else ssl.CERT_OPTIONAL)
    return ctx


def client_context(settings: TlsClientSettings) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if settings.verify:
        if settings.trust_cert_path:
            _load_trust(ctx, settings.trust_cert_path, "tls_ca")
        else:
            ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if settings.cert_path:
        _load_chain(ctx, settings.cert_path, settings.key_path or None, settings.key_password, "tls_client")
    return ctx


def _load_chain(ctx: ssl.SSLContext, cert: str, key: str | None, password: str, key_prefix: str) -> None:
    try:
        ctx.load_cert_chain(cert, key or None, password or None)
    except FileNotFoundError as exc:
        raise FileNotFoundError(exc.errno, f"TLS certificate or key not found ({key_prefix}_cert_path / "
                                f"{key_prefix}_key_path)", exc.filename) from None
    except ssl.SSLError as exc:
        raise ssl.SSLError(exc.errno, f"cannot load the TLS certificate {cert!r} with key {key!r}: "
                           f"{exc.reason or exc}") from None


def _load_trust(ctx: ssl.SSLContext, path: str, key: str) -> None:
    try:
        ctx.load_verify_locations(cafile=path)
    except FileNotFoundError as exc:
        raise FileNotFoundError(exc.errno, f"TLS CA file not found ({key})", exc.filename) from None
    except ssl.SSLError as exc:
        raise ssl.SSLError(exc.errno, f"cannot load the TLS CA file {path!r} ({key}): {exc.reason or exc}") from None


def describe_client_tls_error(exc: BaseException) -> str:
    """Why a client's TLS connection could not be set up, in words an operator acts on."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (f"TLS certificate verification failed: {exc.verify_message or exc.reason} "
                "(is the server's certificate signed by the CA given with --tls-ca / trust_cert_path, "
                "and issued for this host name or address?)")
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake failed: {exc.reason or exc}"
    if isinstance(exc, (ConnectionResetError, EOFError)) or not str(exc):
        reason = "the server closed the connection"
    else:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return f"TLS handshake failed: {reason} (does the server have TLS turned on?)"
