"""What a client presents: the TLS files to connect with, and who it is.

Theory of operation. Every connection to a replica is mutual TLS against the
cluster CA (xce/pki.py), unless the cluster file says `insecure = true`. A
daemon (worker, scheduler, replica) is identified by its own certificate.
A person is identified by a bearer token (`authorization: Bearer ...`
metadata) or a MUNGE credential (`x-xce-munge`), and connects with the
cluster's shared client certificate, which admits the connection and proves
nothing about who is calling.

Where the pieces come from, first found wins:
- TLS: the cluster file's `[tls]` section (`ca`, `client_cert`,
  `client_key`, relative to the file), or $XCE_CA, $XCE_CERT, $XCE_KEY.
- The token: $XCE_TOKEN; the file $XCE_TOKEN_FILE; `~/.config/xce/token`
  ($XDG_CONFIG_HOME); the local cluster's `admin.token` beside its cluster
  file, if this user may read it. A token file readable by others is refused,
  as ssh refuses such a key.
- MUNGE, when no token was found: `[auth] munge = true` in the cluster file, or $XCE_MUNGE=1: a fresh
  credential from `munge` for every attempt of every call (munged refuses to
  decode one twice); munged's socket: $XCE_MUNGE_SOCKET, else the cluster file's `munge_socket`
  (the controllers' munged is this host's), else the default. A daemon's certificate (a worker's,
  a scheduler's) proves it: no MUNGE beside it.

Rotation: credentials made from files (`files`) read them again whenever one
of them changed (its modification time or size), so a daemon's next
connection presents a renewed certificate and trusts a new CA bundle without
a restart (`client.channel.Client` drops its channels when they changed;
controller/replica.py does the same on the server side). A file that cannot
be read at that moment leaves the last good copy in use.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Sequence

from client.cluster_file import StrPath, client_table, read_toml

TYPE_CHECKING = False  # not typing's: importing it is ~2 ms of every command's start
if TYPE_CHECKING:  # grpc: imported where a channel is made: the command line never makes one
    from typing import Any

    import grpc

TOKEN_PREFIX = "xce_"
AUTH_METADATA = "authorization"
MUNGE_METADATA = "x-xce-munge"
# For the audit trail only (controller/authn.py): the gateway's own key beside its caller's, which
# proves the call came through it; and what the client says it is (the command line: `cli`), a claim.
RELAY_METADATA = "x-xce-relay"
CLIENT_METADATA = "x-xce-client"
ADMIN_TOKEN_FILE = "admin.token"


class CredentialsError(Exception):
    """A TLS file or a token cannot be used: say which and why."""


class TlsFiles:
    """Where the CA, the certificate and its key are (plain classes here and in Credentials, not
    dataclasses: importing dataclasses costs ~5 ms of every command)."""

    __slots__ = ("ca", "cert", "key", "insecure")

    def __init__(self, ca: StrPath | None, cert: StrPath | None, key: StrPath | None,
                 insecure: bool = False) -> None:
        self.ca, self.cert, self.key = (None if p is None else os.fspath(p) for p in (ca, cert, key))
        self.insecure = insecure

    def _fields(self) -> tuple[Any, ...]:
        return self.ca, self.cert, self.key, self.insecure

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TlsFiles) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return f"TlsFiles(ca={self.ca!r}, cert={self.cert!r}, key={self.key!r}, insecure={self.insecure!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return TlsFiles, self._fields()


class FileWatch:
    """The bytes of some files, read again once any of them changed (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stamp: tuple[tuple[int, int, int, int], ...] | None = None
        self._data: tuple[bytes | None, ...] = ()

    def __getstate__(self) -> dict[str, Any]:
        # Credentials travel to benchmark and test processes (multiprocessing pickles them): a lock
        # does not, and the other side reads the files afresh.
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]

    @staticmethod
    def stamp(paths: Sequence[StrPath | None]) -> tuple[tuple[int, int, int, int], ...]:
        stamps = []
        for path in paths:
            try:
                info = os.stat(path) if path is not None else None
            except OSError:
                info = None
            stamps.append((info.st_ino, info.st_mtime_ns, info.st_ctime_ns, info.st_size) if info is not None
                          else (0, 0, 0, 0))
        return tuple(stamps)

    def read(self, paths: Sequence[StrPath | None],
             first: tuple[bytes | None, ...]) -> tuple[bytes | None, ...]:
        """The files' bytes; `first` (what was read when the credentials were made) until the first
        call, which reads them again: they may have changed in between."""
        stamp = self.stamp(paths)
        with self._lock:
            if self._stamp is None:
                self._stamp, self._data = (), first
            if stamp != self._stamp:
                try:
                    self._data = tuple(_bytes_of(p) if p is not None else None for p in paths)
                    self._stamp = stamp
                except OSError:
                    pass  # half-replaced, say: the last good copy, and another look next time
            return self._data


class Credentials:
    """What a client presents; equal when they present the same (wherever the files are)."""

    __slots__ = ("insecure", "ca", "cert", "key", "token", "munge", "files", "munge_socket", "relay",
                 "client", "_watch")

    def __init__(self, insecure: bool = False, ca: bytes | None = None, cert: bytes | None = None,
                 key: bytes | None = None, token: str | None = None, munge: bool = False,
                 files: TlsFiles | None = None, munge_socket: str = "", relay: str | None = None,
                 client: str = "") -> None:
        self.insecure, self.ca, self.cert, self.key = insecure, ca, cert, key
        self.token, self.munge = token, munge
        self.munge_socket = munge_socket  # munged's, if not the default: $XCE_MUNGE_SOCKET, or [auth]'s
        self.files = files  # where ca, cert, key came from
        self.relay = relay  # the gateway's own token, sent beside each caller's (RELAY_METADATA)
        self.client = client  # what this client says it is: "cli" for the command line (CLIENT_METADATA)
        self._watch = FileWatch()

    def _fields(self) -> tuple[Any, ...]:
        return (self.insecure, self.ca, self.cert, self.key, self.token, self.munge, self.munge_socket,
                self.relay, self.client)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Credentials) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:  # never the key or the token
        return (f"Credentials(insecure={self.insecure}, ca={'set' if self.ca else None}, "
                f"cert={'set' if self.cert else None}, key={'set' if self.key else None}, "
                f"token={'set' if self.token else None}, munge={self.munge}, files={self.files!r}, "
                f"relay={'set' if self.relay else None}, client={self.client!r})")

    def __reduce__(self) -> tuple[Any, ...]:
        return Credentials, (*self._fields()[:6], self.files, self.munge_socket, self.relay, self.client)

    def tls(self) -> tuple[bytes | None, bytes | None, bytes | None]:
        """(ca, cert, key) as the files hold them now (those given, if not from files)."""
        if self.files is None:
            return self.ca, self.cert, self.key
        files = self.files
        ca, cert, key = self._watch.read((files.ca, files.cert, files.key), (self.ca, self.cert, self.key))
        return ca, cert, key

    def stamp(self) -> object:
        """Changes when the files do: a long-lived channel made before should be made again."""
        files = self.files
        return None if files is None else FileWatch.stamp((files.ca, files.cert, files.key))

    def channel(self, address: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
        import grpc

        if self.insecure:
            return grpc.insecure_channel(address, options=list(options))
        return grpc.secure_channel(address, self._channel_credentials(), options=list(options))

    def aio_channel(self, address: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.aio.Channel:
        import grpc

        if self.insecure:
            return grpc.aio.insecure_channel(address, options=list(options))
        return grpc.aio.secure_channel(address, self._channel_credentials(), options=list(options))

    def check(self) -> None:
        """Raise CredentialsError if no TLS connection can be made with these."""
        if not self.insecure and self.ca is None:
            raise CredentialsError("TLS needs the cluster CA certificate ([tls] ca in the cluster file: "
                                   "--cluster FILE, $XCE_CLUSTER; or $XCE_CA); or the cluster's "
                                   "insecure = true")

    def _channel_credentials(self) -> grpc.ChannelCredentials:
        import grpc

        self.check()
        ca, cert, key = self.tls()
        return grpc.ssl_channel_credentials(ca, key, cert)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        items: list[tuple[str, str]] = []
        if self.token:
            items.append((AUTH_METADATA, f"Bearer {self.token}"))
        if self.munge:
            items.append((MUNGE_METADATA, munge_credential(self.munge_socket)))
        if self.relay:
            items.append((RELAY_METADATA, f"Bearer {self.relay}"))
        if self.client:
            items.append((CLIENT_METADATA, self.client))
        return tuple(items)

    def with_certificate(self, cert: StrPath, key: StrPath) -> Credentials:
        """These credentials with a daemon's certificate, which proves it (a worker's, a scheduler's):
        no MUNGE credential beside it."""
        files = self.files and TlsFiles(self.files.ca, cert, key, self.files.insecure)
        return Credentials(self.insecure, self.ca, _read(cert, "certificate"), _read(key, "key"), self.token,
                           False, files)


def tls_files(raw: dict[str, Any], base: StrPath) -> TlsFiles:
    """The cluster file's [tls] section, paths resolved against the file's directory."""
    tls = raw.get("tls", {})
    if not isinstance(tls, dict):
        raise CredentialsError("[tls] must be a table")
    insecure = tls.get("insecure", False)
    if not isinstance(insecure, bool):
        raise CredentialsError("[tls] insecure must be true or false")

    def path(key: str, default: str) -> str | None:
        value = tls.get(key, default)
        if not isinstance(value, str):
            raise CredentialsError(f"[tls] {key} must be a path")
        return os.path.join(base, value) if value else None

    return TlsFiles(ca=path("ca", "tls/ca.crt"), cert=path("client_cert", "tls/client-xce.crt"),
                    key=path("client_key", "tls/client-xce.key"), insecure=insecure)


def for_cluster(cluster_file: StrPath | None, token: str | None = None, use_token_search: bool = True,
                cert: StrPath | None = None, key: StrPath | None = None, cached: bool = False) -> Credentials:
    """A person's or daemon's credentials for the cluster described by `cluster_file`; `cached`:
    read through the command line's cache (cluster_file.client_table)."""
    raw: dict[str, Any] = {}
    base = os.getcwd()
    if cluster_file is not None:
        try:
            raw = (client_table if cached else read_toml)(cluster_file, CredentialsError, "cluster file")
        except OSError as exc:
            raise CredentialsError(f"cannot read the cluster file {cluster_file}: {exc}") from None
        base = os.path.dirname(os.path.realpath(cluster_file))
    # Without a cluster file, only what the environment names: no default paths.
    files = tls_files(raw, base) if cluster_file is not None else TlsFiles(None, None, None)
    env = os.environ
    ca_path = env.get("XCE_CA") or files.ca
    cert_path = cert or env.get("XCE_CERT") or files.cert
    key_path = key or env.get("XCE_KEY") or files.key
    auth = raw.get("auth", {}) if isinstance(raw.get("auth", {}), dict) else {}
    munge = env.get("XCE_MUNGE") == "1" or (bool(auth.get("munge", False)) and env.get("XCE_MUNGE") != "0")
    if token is None and use_token_search:
        token = find_token(base if cluster_file is not None else None)
    # A token, when there is one, says who it is, and a daemon's own certificate (`cert`) says so too;
    # MUNGE otherwise.
    munge = munge and token is None and cert is None
    # The controllers' munged is this host's too (MUNGE proves a uid to the daemons of one host's key).
    socket = env.get("XCE_MUNGE_SOCKET") or str(auth.get("munge_socket", "") or "")
    if files.insecure:
        return Credentials(insecure=True, token=token, munge=munge, munge_socket=socket)
    return Credentials(ca=_read(ca_path, "CA certificate") if ca_path else None,
                       cert=_read(cert_path, "client certificate") if cert_path else None,
                       key=_read(key_path, "client key") if key_path else None, token=token, munge=munge,
                       files=TlsFiles(ca_path, cert_path, key_path), munge_socket=socket)


def _bytes_of(path: StrPath) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _read(path: StrPath, what: str) -> bytes:
    try:
        return _bytes_of(path)
    except OSError as exc:
        raise CredentialsError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None


def find_token(cluster_dir: StrPath | None) -> str | None:
    env = os.environ
    if env.get("XCE_TOKEN"):
        return env["XCE_TOKEN"].strip()
    candidates: list[tuple[str, bool]] = []
    if env.get("XCE_TOKEN_FILE"):
        candidates.append((env["XCE_TOKEN_FILE"], True))
    config_home = env.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    candidates.append((os.path.join(config_home, "xce", "token"), False))
    if cluster_dir is not None:
        candidates.append((os.path.join(cluster_dir, ADMIN_TOKEN_FILE), False))
    for path, required in candidates:
        token = read_token_file(path, required)
        if token:
            return token
    return None


def read_token_file(path: StrPath, required: bool = False) -> str | None:
    """The token in `path`; None if absent (or not ours to read); refused if others may read it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except (FileNotFoundError, PermissionError, NotADirectoryError):
        if required:
            raise CredentialsError(f"cannot read the token file {path}") from None
        return None
    except OSError as exc:
        raise CredentialsError(f"cannot read the token file {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd) as f:
        info = os.fstat(f.fileno())
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise CredentialsError(f"the token file {path} is readable by others "
                                   f"(mode {stat.S_IMODE(info.st_mode):04o}); chmod 600 it")
        return f.read().strip() or None


def new_token() -> tuple[str, str]:
    """(token, its hex SHA-256): 256 random bits; only the hash ever leaves this process."""
    import base64
    import secrets

    token = TOKEN_PREFIX + base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")
    return token, token_hash(token)


def token_hash(token: str) -> str:
    import hashlib  # here: OpenSSL's start-up is a few ms of every command otherwise

    return hashlib.sha256(token.encode()).hexdigest()


def munge_credential(socket: str = "") -> str:
    """A fresh MUNGE credential from the local munged (it proves this process's uid and gid); `socket`
    (else $XCE_MUNGE_SOCKET) names munged's socket if it is not the default one."""
    import subprocess

    socket = socket or os.environ.get("XCE_MUNGE_SOCKET", "")
    argv = ["munge", "-n", *(["-S", socket] if socket else [])]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CredentialsError(f"munge failed: {exc}") from None
    if done.returncode != 0:
        raise CredentialsError(f"munge failed: {done.stderr.strip()}")
    return done.stdout.strip()
