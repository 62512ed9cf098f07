"""PgBouncer (Debian's 1.18) in transaction mode in front of a test server, for
test_pooler.py and test_conformance.py: `start_bouncer(directory, port, node)` writes a
private ini (trust auth, pool_mode = transaction, 3 server connections), starts it as the
postgres user and polls until it answers; `stop_bouncer(directory)` ends it by its pidfile.
Listens on a unix socket in `directory`, and on 127.0.0.1 too when asked (`tcp=True`)."""
import os
import subprocess

import psycopg

from harness import poll_until

BOUNCER_INI = """\
[databases]
postgres = host={shard_dir} port={shard_port} dbname=postgres
[pgbouncer]
listen_addr = {listen_addr}
listen_port = {port}
unix_socket_dir = {dir}
auth_type = trust
auth_file = {dir}/users.txt
pool_mode = transaction
default_pool_size = 3
max_client_conn = 100
server_round_robin = 0
ignore_startup_parameters = extra_float_digits
logfile = {dir}/pgbouncer.log
pidfile = {dir}/pgbouncer.pid
"""


def start_bouncer(directory, port, shard, tcp=False):
    """A PgBouncer in transaction mode in front of `shard`; returns its DSN (TCP when
    `tcp`, else its socket in `directory`)."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "pgbouncer.ini"), "w") as f:
        f.write(BOUNCER_INI.format(shard_dir=shard.dir, shard_port=shard.port, port=port, dir=directory,
                                   listen_addr="127.0.0.1" if tcp else ""))
    with open(os.path.join(directory, "users.txt"), "w") as f:
        f.write('"postgres" ""\n')
    subprocess.run(["chown", "-R", "postgres:postgres", directory], check=True)
    subprocess.run(["runuser", "-u", "postgres", "--", "pgbouncer", "-d", os.path.join(directory, "pgbouncer.ini")],
                   check=True, timeout=30)
    host = "127.0.0.1" if tcp else directory
    dsn = f"host={host} port={port} dbname=postgres user=postgres"
    poll_until(f"PgBouncer on {directory} accepts", lambda: _answers(dsn), True, 30)
    return dsn


def _answers(dsn):
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=2, prepare_threshold=None) as conn:
            return conn.execute("SELECT true").fetchone()[0]
    except psycopg.OperationalError:
        return False


def stop_bouncer(directory):
    try:
        with open(os.path.join(directory, "pgbouncer.pid")) as f:
            os.kill(int(f.read().strip()), 15)
    except (FileNotFoundError, ProcessLookupError, ValueError):
        pass
