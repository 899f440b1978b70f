"""PgBouncer in front of the embedded PostgreSQL, for ``make up`` and the tests (ADR 0057).

API servers, the scheduler and the workers open many short transactions; in production they
reach PostgreSQL through PgBouncer in transaction pooling mode, so thousands of client
connections share a few dozen server ones. The dev stack and the integration tests run the
same thing: Debian's ``/usr/sbin/pgbouncer`` (``pgbouncer`` in the Makefile's
``APT_PACKAGES``) on a loopback port, in the foreground as a child of this process, with its
files under ``base_dir``. The revision stream (logical replication, ``LISTEN``) and the
migrations never go through it: they connect to PostgreSQL directly.

PgBouncer refuses to run as root; as root it runs as the same unprivileged account as the
embedded PostgreSQL (:func:`app.devstack.postgres.service_account`).

Authentication is ``trust`` on loopback, like the embedded server's ``pg_hba.conf``: a user
must still be listed in the ``userlist.txt`` written here, so only the roles passed as
``users`` (and the stats user) can connect. Any database name is forwarded to the server of
the same name (a ``*`` entry), so one PgBouncer serves every test database.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

import psycopg

from app.devstack.postgres import SUPERUSER, Account, make_traversable, service_account
from app.devstack.supervise import LOOPBACK, port_is_free, sticky_port, stop_process, tail

BINARY = "/usr/sbin/pgbouncer"
STATS_USER = "qm_stats"  # reads SHOW POOLS / SHOW STATS on the admin console; no server role
ADMIN_DATABASE = "pgbouncer"  # the admin console's virtual database
APP_ROLE = "qm_app"


def pgbouncer_path() -> Path:
    """Debian's PgBouncer binary (``$QM_PGBOUNCER_BIN`` overrides), or a clear error."""
    path = Path(os.environ.get("QM_PGBOUNCER_BIN") or shutil.which("pgbouncer") or BINARY)
    if not path.exists():
        raise RuntimeError(
            f"PgBouncer is not installed ({path} is missing): apt-get install pgbouncer"
        )
    return path


def role_exists(url: str, role: str) -> bool:
    """Tell whether the server behind ``url`` has login role ``role`` (migration 0014 makes
    ``qm_app``)."""
    with psycopg.connect(url, autocommit=True) as db:
        found = db.execute(
            "SELECT 1 FROM pg_roles WHERE rolname = %s AND rolcanlogin", (role,)
        ).fetchone()
    return found is not None


def as_user(url: str, user: str) -> str:
    """``url`` with its user name replaced by ``user`` (host, port and database kept)."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{user}@{host}"))


def pooled_env(direct_url: str, bouncer: EmbeddedPgBouncer) -> dict[str, str]:
    """The variables that send requests through ``bouncer`` as the app role (the superuser
    while no ``qm_app`` exists yet) and keep the stream and the migrations direct."""
    user = APP_ROLE if role_exists(direct_url, APP_ROLE) else SUPERUSER
    database = urlsplit(direct_url).path.lstrip("/")
    return {
        "DATABASE_URL": bouncer.url(database, user),
        "QM_STREAM_DATABASE_URL": as_user(direct_url, user),
        "QM_MIGRATION_DATABASE_URL": direct_url,
        "QM_PGBOUNCER": "1",
        "QM_PGBOUNCER_ADMIN_URL": bouncer.admin_url,
    }


def config_text(port: int, server_port: int, base_dir: Path, pool_size: int) -> str:
    """The ``pgbouncer.ini`` of one dev PgBouncer (see the module)."""
    lines = [
        "[databases]",
        f"* = host={LOOPBACK} port={server_port}",
        "",
        "[pgbouncer]",
        f"listen_addr = {LOOPBACK}",
        f"listen_port = {port}",
        "unix_socket_dir =",
        "auth_type = trust",
        f"auth_file = {base_dir / 'userlist.txt'}",
        "pool_mode = transaction",
        "max_client_conn = 2000",
        f"default_pool_size = {pool_size}",
        "min_pool_size = 0",
        "reserve_pool_size = 5",
        "reserve_pool_timeout = 3",
        "server_idle_timeout = 60",
        "query_wait_timeout = 30",
        # psycopg and JDBC clients send it; asyncpg sends only what PgBouncer tracks.
        "ignore_startup_parameters = extra_float_digits",
        f"stats_users = {STATS_USER}",
        "log_connections = 0",
        "log_disconnections = 0",
        "",
    ]
    return "\n".join(lines)


def userlist_text(users: tuple[str, ...]) -> str:
    """``auth_file`` lines: each user with an empty password (auth is ``trust``)."""
    return "".join(f'"{user}" ""\n' for user in dict.fromkeys((*users, STATS_USER)))


class EmbeddedPgBouncer:
    """One PgBouncer forwarding ``127.0.0.1:port`` to the PostgreSQL on ``server_port``.

    Layout: ``base_dir/pgbouncer.ini``, ``base_dir/userlist.txt``, ``base_dir/pgbouncer.log``
    (its standard error: it logs there) and ``base_dir/port`` (the port last used, reused
    when free).
    """

    def __init__(
        self,
        base_dir: Path,
        server_port: int,
        *,
        users: tuple[str, ...] = (SUPERUSER, APP_ROLE),
        port: int | None = None,
        pool_size: int = 20,
    ) -> None:
        self.base_dir = Path(base_dir).absolute()
        self.server_port = server_port
        self.users = users
        self.pool_size = pool_size
        self.log_path = self.base_dir / "pgbouncer.log"
        self._requested_port = port
        self._port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("PgBouncer has not been started")
        return self._port

    @property
    def pid(self) -> int | None:
        """PgBouncer's pid while it runs, else ``None``."""
        if self._proc is None or self._proc.poll() is not None:
            return None
        return self._proc.pid

    def url(self, database: str, user: str = APP_ROLE) -> str:
        """The URL a client connects to ``database`` through PgBouncer with, as ``user``."""
        return f"postgresql://{user}@{LOOPBACK}:{self.port}/{database}"

    @property
    def admin_url(self) -> str:
        """The admin console (``SHOW POOLS``, ``SHOW STATS``) as the stats user."""
        return self.url(ADMIN_DATABASE, STATS_USER)

    def start(self, timeout: float = 20.0) -> int:
        """Start PgBouncer (no-op if this object runs one already); return its port."""
        if self.pid is not None:
            return self.port
        binary = pgbouncer_path()
        account = service_account()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self._port = self._requested_port or sticky_port(self.base_dir / "port")
        config = self.base_dir / "pgbouncer.ini"
        text = config_text(self._port, self.server_port, self.base_dir, self.pool_size)
        self._write(config, text, account)
        self._write(self.base_dir / "userlist.txt", userlist_text(self.users), account)
        self._write(self.log_path, "", account, append=True)
        if account is not None:
            make_traversable(self.base_dir)
            os.chown(self.base_dir, account.uid, account.gid)
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                [str(binary), str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=self.base_dir,
                start_new_session=True,
                user=account.uid if account else None,
                group=account.gid if account else None,
                extra_groups=[] if account else None,
            )
        self._wait_listening(timeout)
        return self._port

    def stop(self) -> None:
        """Stop PgBouncer (SIGTERM: immediate shutdown, then SIGKILL) and reap it."""
        if self._proc is not None:
            stop_process(self._proc)
            self._proc = None

    def __enter__(self) -> EmbeddedPgBouncer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _wait_listening(self, timeout: float) -> None:
        assert self._proc is not None and self._port is not None
        deadline = time.monotonic() + timeout
        while port_is_free(self._port):
            if self._proc.poll() is not None or time.monotonic() >= deadline:
                self.stop()
                raise RuntimeError(
                    f"PgBouncer did not come up on port {self._port}:\n{tail(self.log_path)}"
                )
            time.sleep(0.05)

    @staticmethod
    def _write(path: Path, text: str, account: Account | None, *, append: bool = False) -> None:
        with path.open("a" if append else "w") as fh:
            fh.write(text)
        path.chmod(0o600)
        if account is not None:
            os.chown(path, account.uid, account.gid)
