#!/usr/bin/env bash
# Builds packages that install id_gen without Rust, into target/packages/:
#   id_gen-<ext>-pg<V>-linux-x86_64.tar.gz     for each PostgreSQL V: lib/id_gen.so,
#                                              share/extension/ (control, install and update
#                                              scripts), install.sh <pg_config>, README.txt
#   postgresql-15-id-gen_<ext>-1_amd64.deb     PostgreSQL 15 at Debian's paths (with --pg 15)
#   id_gen-mysql-<plugin>-linux-x86_64.tar.gz  the MariaDB UDF plugin: the library, an example
#                                              id_gen_mysql.cnf, install.sql, README.txt
# <ext> is id_gen.control's default_version; <plugin> is crates/id_gen_mysql's version.
# Usage: scripts/package.sh [--pg 15|16|17|18 ...] [--no-mysql]   (default: all four and the plugin)
#   --pg may be repeated or given several versions (--pg 15 16, --pg 15,16).
# Release builds, one after the other (cargo pgrx package per version, then cargo build -p
# id_gen_mysql). Idempotent: every artifact is rebuilt from scratch and replaced.
# tests/packages.sh installs and tests what this writes.
set -euo pipefail
REPO_ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO_ROOT"

VERSIONS=() MYSQL=1
while [ $# -gt 0 ]; do
  case $1 in
    --pg)
      shift
      [ $# -gt 0 ] || { echo "--pg needs a version (15, 16, 17, 18)" >&2; exit 2; }
      while [ $# -gt 0 ] && [[ $1 =~ ^[0-9,]+$ ]]; do
        IFS=, read -ra vs <<<"$1"; VERSIONS+=("${vs[@]}"); shift
      done ;;
    --no-mysql) MYSQL=0; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "unknown argument '$1' (usage: scripts/package.sh [--pg 15|16|17|18 ...] [--no-mysql])" >&2; exit 2 ;;
  esac
done
[ ${#VERSIONS[@]} -gt 0 ] || VERSIONS=(15 16 17 18)
for v in "${VERSIONS[@]}"; do
  case $v in 15|16|17|18) ;; *) echo "unsupported PostgreSQL version '$v' (supported: 15, 16, 17, 18)" >&2; exit 2 ;; esac
done

EXT_VERSION=$(sed -n "s/^default_version *= *'\([^']*\)'.*/\1/p" id_gen.control)
[ -n "$EXT_VERSION" ] || { echo "no default_version in id_gen.control" >&2; exit 1; }
PLUGIN_VERSION=$(sed -n 's/^version *= *"\([^"]*\)".*/\1/p' crates/id_gen_mysql/Cargo.toml | head -1)
DESCRIPTION=$(sed -n "s/^comment *= *'\([^']*\)'.*/\1/p" id_gen.control)
MAINTAINER=${IDG_MAINTAINER:-$(git log -1 --format='%an <%ae>' 2>/dev/null || echo 'id_gen maintainers <root@localhost>')}
OUT=$REPO_ROOT/target/packages
LOGS=$REPO_ROOT/target/package-logs
mkdir -p "$OUT" "$LOGS"
ARTIFACTS=()
SECONDS=0

log() { printf '\n=== %s\n' "$*" >&2; }

# run LOGFILE CMD...: runs CMD with its output in LOGFILE; on failure shows the errors.
run() {
  local logf=$1; shift
  if ! "$@" >"$logf" 2>&1; then
    { grep -E -A12 '^(error|Error)' "$logf" || tail -40 "$logf"; } | head -80 >&2
    echo "failed: $* (full output: $logf)" >&2
    return 1
  fi
}

# The README.txt of a PostgreSQL tarball.
pg_readme() {
  local v=$1 dir=$2 glibc=$3
  cat <<TXT
id_gen $EXT_VERSION for PostgreSQL $v (Linux x86_64, glibc)
$DESCRIPTION.

Contents
  lib/id_gen.so                 the extension library
  share/extension/id_gen.control, id_gen--$EXT_VERSION.sql
                                the control file and install script
  share/extension/id_gen--A--B.sql
                                update scripts from earlier versions (ALTER EXTENSION id_gen UPDATE)
  install.sh                    copies them into a PostgreSQL $v installation

Requirements
  - PostgreSQL $v (any minor release) on Linux x86_64 with glibc $glibc or newer; no Rust
    toolchain. This build was made against PostgreSQL $("$PG_CONFIG" --version | sed 's/^PostgreSQL //').
  - Write access to that installation's directories (usually root).

Install
  cd $dir
  sudo ./install.sh /path/to/pg_config     (default: the pg_config on PATH)
install.sh checks that pg_config belongs to PostgreSQL $v and copies lib/id_gen.so to
\$(pg_config --pkglibdir) and share/extension/* to \$(pg_config --sharedir)/extension.

Then, in postgresql.conf:
  shared_preload_libraries = 'id_gen'      (add it to the list if there is one)
and restart the server (a reload is not enough: the library sets up shared memory and
background workers at start). In each database:
  CREATE EXTENSION id_gen;
Order numbers also need a key-encryption key: id_gen.order_no_kek_file = '/path/kek.hex'
(64 hex digits, e.g. openssl rand -hex 32, readable only by the server's OS user), then
SELECT id_gen.create_order_no_key();

Updating from an earlier version: install.sh, restart, then ALTER EXTENSION id_gen UPDATE;
in every database that has the extension.
Uninstall: DROP EXTENSION id_gen; remove id_gen from shared_preload_libraries, restart,
delete \$(pg_config --pkglibdir)/id_gen.so and \$(pg_config --sharedir)/extension/id_gen*.

Documentation: README.md, docs/ (guide/, reference.md, operations.md, design.md) of the source tree.
TXT
}

# The install.sh of a PostgreSQL tarball (POSIX sh; the user's machine may have no bash).
pg_install_sh() {
  local v=$1
  cat <<'SH' | sed "s/@PG_MAJOR@/$v/g; s/@EXT_VERSION@/$EXT_VERSION/g"
#!/bin/sh
# Installs id_gen @EXT_VERSION@ into a PostgreSQL @PG_MAJOR@ installation.
# Usage: ./install.sh [/path/to/pg_config]   (default: pg_config on PATH)
# Copies lib/id_gen.so to $(pg_config --pkglibdir) and share/extension/* to
# $(pg_config --sharedir)/extension; refuses a pg_config of another major version.
set -eu
PG_MAJOR=@PG_MAJOR@
EXT_VERSION=@EXT_VERSION@
HERE=$(cd "$(dirname "$0")" && pwd)
PG_CONFIG=${1:-pg_config}
if ! command -v "$PG_CONFIG" >/dev/null 2>&1; then
  echo "install.sh: pg_config not found ('$PG_CONFIG'); pass its path, e.g. ./install.sh /usr/lib/postgresql/$PG_MAJOR/bin/pg_config" >&2
  exit 1
fi
PG_VERSION_TEXT=$("$PG_CONFIG" --version)
major=$(printf '%s\n' "$PG_VERSION_TEXT" | sed -n 's/^PostgreSQL \([0-9][0-9]*\).*/\1/p')
if [ "$major" != "$PG_MAJOR" ]; then
  echo "install.sh: this package is for PostgreSQL $PG_MAJOR, but $PG_CONFIG is '$PG_VERSION_TEXT': use the id_gen package for PostgreSQL ${major:-?}" >&2
  exit 1
fi
LIBDIR=$("$PG_CONFIG" --pkglibdir)
EXTDIR=$("$PG_CONFIG" --sharedir)/extension
for d in "$LIBDIR" "$EXTDIR"; do
  [ -d "$d" ] || { echo "install.sh: $d (from $PG_CONFIG) does not exist" >&2; exit 1; }
  [ -w "$d" ] || { echo "install.sh: $d is not writable: run as the installation's owner (e.g. sudo ./install.sh $PG_CONFIG)" >&2; exit 1; }
done
# put SRC DIR MODE: copy beside the target, then rename over it, so that a running server
# that has the old library mapped keeps its copy intact.
put() {
  tmp="$2/.$(basename "$1").$$"
  cp "$1" "$tmp"
  chmod "$3" "$tmp"
  mv -f "$tmp" "$2/$(basename "$1")"
}
put "$HERE/lib/id_gen.so" "$LIBDIR" 0755
n=0
for f in "$HERE"/share/extension/*; do
  put "$f" "$EXTDIR" 0644
  n=$((n + 1))
done
echo "installed id_gen $EXT_VERSION for $PG_VERSION_TEXT:"
echo "  $LIBDIR/id_gen.so"
echo "  $EXTDIR/id_gen.control and the sql scripts ($n files in all)"
echo "next: shared_preload_libraries = 'id_gen' in postgresql.conf, restart the server, CREATE EXTENSION id_gen;"
SH
}

# glibc_of SO: the newest glibc symbol version SO uses (the oldest glibc it runs on).
glibc_of() {
  objdump -T "$1" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1
}

# The DEBIAN/control of the PostgreSQL 15 package. Depends: postgresql-15, and the C
# runtime the library links (glibc at the newest symbol version it uses; libgcc_s for
# unwinding).
deb_control() {
  local so=$1 size=$2 glibc needed deps=("postgresql-15") lib
  glibc=$(glibc_of "$so")
  needed=$(objdump -p "$so" | awk '$1 == "NEEDED" {print $2}')
  for lib in $needed; do
    case $lib in
      libc.so.6|libm.so.6|libpthread.so.0|libdl.so.2|librt.so.1|ld-linux-x86-64.so.2) ;;
      libgcc_s.so.1) deps+=("libgcc-s1") ;;
      *) echo "id_gen.so needs $lib: add its package to the .deb's Depends (scripts/package.sh)" >&2; return 1 ;;
    esac
  done
  [ -n "$glibc" ] && deps+=("libc6 (>= $glibc)")
  cat <<CTL
Package: postgresql-15-id-gen
Version: $EXT_VERSION-1
Architecture: amd64
Maintainer: $MAINTAINER
Installed-Size: $size
Depends: $(IFS=,; echo "${deps[*]}" | sed 's/,/, /g')
Section: database
Priority: optional
Description: shard-aware 64-bit IDs and encrypted order numbers for PostgreSQL 15
 id_gen hands out globally unique, shard-aware 64-bit IDs: named sequences
 served from shared memory and refilled by segments in the background, the
 shard gene of the owning customer baked into each ID, external order numbers
 (FF1-AES256 under versioned, KEK-wrapped keys), dated serials, gene-in-low-bits
 IDs and Snowflake IDs, distributed tables and online moves between shards.
 .
 Needs shared_preload_libraries = 'id_gen' in postgresql.conf and a restart,
 then CREATE EXTENSION id_gen; in each database.
CTL
}

deb_copyright() {
  cat <<TXT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: id_gen
Upstream-Contact: $MAINTAINER

Files: *
Copyright: id_gen maintainers
License: Apache-2.0
 On Debian systems, the complete text of the Apache License 2.0 can be found in
 /usr/share/common-licenses/Apache-2.0.
TXT
}

# package_pg V: builds the extension for PostgreSQL V and writes its tarball (and for 15 the .deb).
package_pg() {
  local v=$1
  # In a subshell: common.sh sets PG_VERSION's paths (PG_CONFIG) and its own shell options.
  (
    export PG_VERSION=$v
    source scripts/common.sh
    ensure_toolchain
    STAGE=$(mktemp -d /tmp/idg_package.XXXXXX)
    trap 'rm -rf "$STAGE"' EXIT
    log "PostgreSQL $v: cargo pgrx package (release)"
    run "$LOGS/pgrx-package-pg$v.log" cargo pgrx package --pg-config "$PG_CONFIG" \
      --no-default-features --features "pg$v" --out-dir "$STAGE/pgrx"
    local pkglibdir sharedir so extfiles
    pkglibdir=$STAGE/pgrx$("$PG_CONFIG" --pkglibdir)
    sharedir=$STAGE/pgrx$("$PG_CONFIG" --sharedir)/extension
    so=$pkglibdir/id_gen.so
    [ -f "$so" ] || { echo "cargo pgrx package wrote no $so" >&2; find "$STAGE/pgrx" -type f >&2; exit 1; }
    [ -f "$sharedir/id_gen.control" ] && [ -f "$sharedir/id_gen--$EXT_VERSION.sql" ] \
      || { echo "cargo pgrx package wrote no control file or id_gen--$EXT_VERSION.sql in $sharedir" >&2; exit 1; }
    # The update scripts in sql/ must all be there (pgrx copies sql/id_gen--*.sql).
    local f
    for f in sql/id_gen--*--*.sql; do
      cmp -s "$f" "$sharedir/$(basename "$f")" || { echo "$(basename "$f") missing or different in the package" >&2; exit 1; }
    done
    # Only the extension's own files: nothing else pgrx may have put there.
    extfiles=$(cd "$sharedir" && ls id_gen.control id_gen--*.sql)

    local name=id_gen-$EXT_VERSION-pg$v-linux-x86_64
    local t=$STAGE/tar/$name
    mkdir -p "$t/lib" "$t/share/extension"
    install -m 0755 "$so" "$t/lib/id_gen.so"
    for f in $extfiles; do install -m 0644 "$sharedir/$f" "$t/share/extension/$f"; done
    pg_install_sh "$v" > "$t/install.sh"; chmod 0755 "$t/install.sh"
    pg_readme "$v" "$name" "$(glibc_of "$so")" > "$t/README.txt"; chmod 0644 "$t/README.txt"
    tar -C "$STAGE/tar" --owner=0 --group=0 --numeric-owner --sort=name -czf "$OUT/$name.tar.gz.tmp" "$name"
    mv -f "$OUT/$name.tar.gz.tmp" "$OUT/$name.tar.gz"

    if [ "$v" = 15 ]; then
      log "PostgreSQL 15: Debian package"
      local r=$STAGE/deb deb=postgresql-15-id-gen_$EXT_VERSION-1_amd64.deb
      mkdir -p "$r/DEBIAN" "$r/usr/lib/postgresql/15/lib" "$r/usr/share/postgresql/15/extension" \
        "$r/usr/share/doc/postgresql-15-id-gen"
      install -m 0644 "$so" "$r/usr/lib/postgresql/15/lib/id_gen.so"
      for f in $extfiles; do install -m 0644 "$sharedir/$f" "$r/usr/share/postgresql/15/extension/$f"; done
      deb_copyright > "$r/usr/share/doc/postgresql-15-id-gen/copyright"
      chmod 0644 "$r/usr/share/doc/postgresql-15-id-gen/copyright"
      deb_control "$so" "$(du -sk --exclude=DEBIAN "$r" | cut -f1)" > "$r/DEBIAN/control"
      find "$r" -type d -exec chmod 0755 {} +
      run "$LOGS/dpkg-deb.log" dpkg-deb --build --root-owner-group "$r" "$OUT/$deb.tmp"
      mv -f "$OUT/$deb.tmp" "$OUT/$deb"
    fi
  )
}

package_mysql() {
  log "MariaDB plugin: cargo build --release -p id_gen_mysql"
  export PATH="$HOME/.cargo/bin:$PATH"
  run "$LOGS/mysql-build.log" cargo build --release -p id_gen_mysql
  local so=target/release/libid_gen_mysql.so name=id_gen-mysql-$PLUGIN_VERSION-linux-x86_64
  local stage t
  stage=$(mktemp -d /tmp/idg_package.XXXXXX)
  t=$stage/$name
  mkdir -p "$t"
  install -m 0644 "$so" "$t/libid_gen_mysql.so"
  cat > "$t/id_gen_mysql.cnf" <<'CNF'
# id_gen_mysql.cnf: where the MariaDB plugin libid_gen_mysql.so finds its order-number keys.
# Copy this file next to the library, into @@plugin_dir (SELECT @@plugin_dir), owned by root
# and not writable by group or others (mode 0644): the plugin refuses it otherwise.
# Only the order-number functions need it; genes and ids work without it.
# Option-file syntax: one [id_gen] group, `name = value`, comments on lines of their own.
# Relative paths are relative to the plugin directory.
[id_gen]
# The key-encryption key: a copy of PostgreSQL's id_gen.order_no_kek_file (64 hex digits),
# owned by mysqld's OS user, mode 0400.
order_no_kek_file  = /etc/mysql/id_gen/kek.hex
# The wrapped keys exported by PostgreSQL, as a superuser:
#   psql -At -c 'SELECT * FROM id_gen.export_order_no_keys()' > order_no_keys.txt
# owned by mysqld's OS user, mode 0400. Replace it atomically to rotate (write, then mv);
# it is re-read from the next statement on.
order_no_keys_file = /etc/mysql/id_gen/order_no_keys.txt
CNF
  cat > "$t/install.sql" <<'SQL'
-- The id_gen UDFs. Copy libid_gen_mysql.so into @@plugin_dir first, then, as a user with
-- the INSERT privilege on mysql.func (root):  mariadb < install.sql
-- The definitions are kept in mysql.func and survive restarts. Every account of the server
-- can call every UDF: create id_gen_decode_order_no only where all accounts may decode.
CREATE FUNCTION id_gen_shard_gene          RETURNS INTEGER SONAME 'libid_gen_mysql.so';
CREATE FUNCTION id_gen_shard_of            RETURNS INTEGER SONAME 'libid_gen_mysql.so';
CREATE FUNCTION id_gen_seq_of              RETURNS INTEGER SONAME 'libid_gen_mysql.so';
CREATE FUNCTION id_gen_compose_id          RETURNS INTEGER SONAME 'libid_gen_mysql.so';
CREATE FUNCTION id_gen_encode_order_no     RETURNS STRING  SONAME 'libid_gen_mysql.so';
CREATE FUNCTION id_gen_encode_order_no_bin RETURNS STRING  SONAME 'libid_gen_mysql.so';
CREATE FUNCTION id_gen_decode_order_no     RETURNS INTEGER SONAME 'libid_gen_mysql.so';
SQL
  cat > "$t/uninstall.sql" <<'SQL'
-- Drops the id_gen UDFs; mysqld unloads libid_gen_mysql.so with the last one.
-- To replace the library: uninstall.sql, copy the new file, install.sql.
DROP FUNCTION IF EXISTS id_gen_shard_gene;
DROP FUNCTION IF EXISTS id_gen_shard_of;
DROP FUNCTION IF EXISTS id_gen_seq_of;
DROP FUNCTION IF EXISTS id_gen_compose_id;
DROP FUNCTION IF EXISTS id_gen_encode_order_no;
DROP FUNCTION IF EXISTS id_gen_encode_order_no_bin;
DROP FUNCTION IF EXISTS id_gen_decode_order_no;
SQL
  cat > "$t/README.txt" <<TXT
id_gen MariaDB plugin $PLUGIN_VERSION (Linux x86_64, glibc), from id_gen $EXT_VERSION
Loadable functions (UDFs) that give MariaDB the genes, ids and order numbers of the id_gen
PostgreSQL extension, computed by the same code.

Contents
  libid_gen_mysql.so   the plugin library
  install.sql          CREATE FUNCTION ... SONAME 'libid_gen_mysql.so' for the seven functions
  uninstall.sql        DROP FUNCTION for the seven functions
  id_gen_mysql.cnf     example: where the plugin finds the order-number keys

Requirements
  MariaDB 10.3 or newer (tested with 10.11); MySQL is not tested. No Rust toolchain.

Install (as root)
  install -m 0444 libid_gen_mysql.so "\$(mariadb -NBe 'SELECT @@plugin_dir')"
  mariadb < install.sql
  mariadb -NBe 'SELECT id_gen_shard_gene(42)'          -- 16043, as in PostgreSQL

Order numbers (id_gen_encode_order_no, id_gen_encode_order_no_bin, id_gen_decode_order_no)
need the keys, made and rotated in PostgreSQL only:
  1. in PostgreSQL, as a superuser:
     psql -At -c 'SELECT * FROM id_gen.export_order_no_keys()' > order_no_keys.txt
  2. on the MariaDB host, that file and a copy of PostgreSQL's KEK file
     (id_gen.order_no_kek_file) readable only by mysqld's user:
     chown mysql: kek.hex order_no_keys.txt; chmod 0400 kek.hex order_no_keys.txt
  3. edit id_gen_mysql.cnf to name them and copy it into @@plugin_dir (owned by root,
     mode 0644). No restart: the files are re-checked at every statement.

Functions
  id_gen_shard_gene(owner)            gene 0..65535 of an integer or string owner
  id_gen_shard_of(id)                 the gene of an id
  id_gen_seq_of(id)                   the sequence part of an id
  id_gen_compose_id(gene, seq)        gene << 47 | seq, with range checks
  id_gen_encode_order_no(order_id)    the order number as UUID text
  id_gen_encode_order_no_bin(order_id) the same as 16 bytes
  id_gen_decode_order_no(order_no)    the order id of a number (NULL and a warning if forged)
String owners hash their bytes as given: use utf8mb4 to match PostgreSQL's genes.
See docs/guide/mariadb.md in the source tree.
TXT
  chmod 0644 "$t"/*
  tar -C "$stage" --owner=0 --group=0 --numeric-owner --sort=name -czf "$OUT/$name.tar.gz.tmp" "$name"
  mv -f "$OUT/$name.tar.gz.tmp" "$OUT/$name.tar.gz"
  rm -rf "$stage"
}

for v in "${VERSIONS[@]}"; do
  package_pg "$v"
  ARTIFACTS+=("id_gen-$EXT_VERSION-pg$v-linux-x86_64.tar.gz")
  [ "$v" = 15 ] && ARTIFACTS+=("postgresql-15-id-gen_$EXT_VERSION-1_amd64.deb")
done
if [ "$MYSQL" = 1 ]; then
  package_mysql
  ARTIFACTS+=("id_gen-mysql-$PLUGIN_VERSION-linux-x86_64.tar.gz")
fi

log "packages in $OUT (built in ${SECONDS}s)"
for a in "${ARTIFACTS[@]}"; do
  printf '%10s  %s\n' "$(du -h --apparent-size "$OUT/$a" | cut -f1)" "$OUT/$a"
done
