#!/usr/bin/env bash
# Installs and tests the packages scripts/package.sh builds, the way a user without Rust would:
#  (a) builds them (scripts/package.sh; IDG_SKIP_BUILD=1 tests those already in target/packages);
#  (b) PostgreSQL 15: the .deb with dpkg -i into Debian's PostgreSQL 15, from which the copy
#      installed by cargo pgrx was removed first; dpkg -L / dpkg -V; a smoke test on a throwaway
#      cluster; dpkg -r removes every file;
#  (c) each PostgreSQL V (15 to 18): the tarball unpacked and its install.sh run against V's
#      pg_config (after removing any id_gen already there), the same smoke test; install.sh
#      refuses a pg_config of another major version and writes nothing;
#  (d) the MariaDB tarball: its files, the UDF symbols the library exports, and a throwaway
#      MariaDB that loads it with install.sql, reads the example id_gen_mysql.cnf, decodes
#      an order number made by PostgreSQL, and drops the functions with uninstall.sql.
# Smoke test: CREATE EXTENSION id_gen; a named sequence hands out 1, 2, 3, ... across segment
# refills; shard_gene(42::bigint) = 16043; an order number encodes and decodes, a tampered one
# is refused.
# Run as root, while nothing else uses the installed extension: copies of id_gen found in
# PostgreSQL 15 and in the /opt/id_gen-pg trees are moved to /var/tmp/idg_pkgtest_saved and
# put back at the end, also on failure (and at the start of the next run, if this one died).
# Usage: tests/packages.sh [--pg 15|16|17|18 ...]   (default: all four)
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C
VERSIONS=()
while [ $# -gt 0 ]; do
  case $1 in
    --pg)
      shift
      while [ $# -gt 0 ] && [[ $1 =~ ^[0-9,]+$ ]]; do IFS=, read -ra vs <<<"$1"; VERSIONS+=("${vs[@]}"); shift; done ;;
    *) echo "usage: tests/packages.sh [--pg 15|16|17|18 ...]" >&2; exit 2 ;;
  esac
done
[ ${#VERSIONS[@]} -gt 0 ] || VERSIONS=(15 16 17 18)
export PG_VERSION=15
source tests/e2e/lib.sh   # common.sh (PostgreSQL 15), fail, pass, assert_eq
ensure_toolchain          # PostgreSQL 15, MariaDB, cargo-pgrx (the 16-18 trees: scripts/package.sh)

EXT_VERSION=$(sed -n "s/^default_version *= *'\([^']*\)'.*/\1/p" id_gen.control)
PLUGIN_VERSION=$(sed -n 's/^version *= *"\([^"]*\)".*/\1/p' crates/id_gen_mysql/Cargo.toml | head -1)
PKG=$REPO_ROOT/target/packages
WORK=/tmp/idg_pkgtest
SAVE=/var/tmp/idg_pkgtest_saved
DEB_NAME=postgresql-15-id-gen
DEB=$PKG/${DEB_NAME}_$EXT_VERSION-1_amd64.deb
UDFS=(id_gen_shard_gene id_gen_shard_of id_gen_seq_of id_gen_compose_id id_gen_encode_order_no
      id_gen_encode_order_no_bin id_gen_decode_order_no)
SUMMARY=()
SECONDS=0
pg_config_of() { case $1 in 15) echo /usr/lib/postgresql/15/bin/pg_config ;; *) echo "/opt/id_gen-pg/$1/bin/pg_config" ;; esac; }
size_of() { du -h --apparent-size "$1" | cut -f1; }

# --- the installed copies of id_gen: saved, removed, restored --------------------------------
# installed_files V: the id_gen files in PostgreSQL V's directories.
installed_files() {
  local c; c=$(pg_config_of "$1")
  ls -d "$("$c" --pkglibdir)/id_gen.so" "$("$c" --sharedir)"/extension/id_gen.control \
        "$("$c" --sharedir)"/extension/id_gen--*.sql 2>/dev/null || true
}
# save_installed V: copies them to $SAVE/V (renamed into place once complete), then removes them.
save_installed() {
  local v=$1 f
  [ -d "$SAVE/$v" ] && fail "$SAVE/$v exists: a saved copy that was not restored"
  rm -rf "$SAVE/$v.part" "$SAVE/$v.ours"; mkdir -p "$SAVE/$v.part"
  for f in $(installed_files "$v"); do
    mkdir -p "$SAVE/$v.part$(dirname "$f")"; cp -a "$f" "$SAVE/$v.part$f"
  done
  mv "$SAVE/$v.part" "$SAVE/$v"
  for f in $(installed_files "$v"); do rm -f "$f"; done
}
# mark_ours V: records the library this test installed into PostgreSQL V.
mark_ours() { so_sum "$1" > "$SAVE/$1.ours"; }
so_sum() {
  local so; so=$("$(pg_config_of "$1")" --pkglibdir)/id_gen.so
  if [ -f "$so" ]; then sha256sum "$so" | cut -d' ' -f1; else echo none; fi
}
# restore_installed V: removes what the test installed and puts the saved copy back. If the
# library there is neither the saved one's absence nor what this test installed (someone ran
# cargo pgrx install meanwhile), that newer copy is kept instead.
restore_installed() {
  local v=$1 f cur ours foreign=
  [ -d "$SAVE/$v" ] || return 0
  cur=$(so_sum "$v"); ours=$(cat "$SAVE/$v.ours" 2>/dev/null || echo none)
  if [ "$cur" != none ] && [ "$cur" != "$ours" ]; then
    foreign=$SAVE/$v.foreign; rm -rf "$foreign"; mkdir -p "$foreign"
    for f in $(installed_files "$v"); do mkdir -p "$foreign$(dirname "$f")"; cp -a "$f" "$foreign$f"; done
  fi
  if [ "$v" = 15 ] && dpkg -s "$DEB_NAME" 2>/dev/null | grep -q '^Status: install ok'; then
    dpkg -r "$DEB_NAME" >/dev/null
  fi
  for f in $(installed_files "$v"); do rm -f "$f"; done
  local from=${foreign:-$SAVE/$v}
  (cd "$from" && find . -type f) | while read -r f; do
    f=${f#.}; mkdir -p "$(dirname "$f")"; cp -a "$from$f" "$f"
  done
  rm -rf "$SAVE/$v" "$SAVE/$v.ours" "$SAVE/$v.foreign"
  if [ -n "$foreign" ]; then
    echo "  PostgreSQL $v: kept the id_gen installed there meanwhile by someone else ($(installed_files "$v" | wc -l) files), not the saved one" >&2
  else
    echo "  restored the saved id_gen of PostgreSQL $v ($(installed_files "$v" | wc -l) files)" >&2
  fi
}
cleanup() {
  local rc=$? v
  set +e
  for v in 15 16 17 18; do
    PG_VERSION=$v bash -c 'source scripts/common.sh; cluster_stop "$1"' _ "$WORK/pg$v" 2>/dev/null
    restore_installed "$v"
  done
  maria_stop "$WORK/maria"
  [ $rc -eq 0 ] || echo "tests/packages.sh FAILED (rc=$rc)" >&2
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# A run that died last time left its saved copies: put them back first.
for v in 15 16 17 18; do restore_installed "$v"; done

# --- the smoke test --------------------------------------------------------------------------
# smoke V [export-dir]: a throwaway cluster of PostgreSQL V with whatever id_gen is installed
# there; with export-dir, writes a KEK, the exported keys, an order id and its number there
# (for the MariaDB test).
smoke() {
  local v=$1 exp=${2:-}
  (
    export PG_VERSION=$v
    source tests/e2e/lib.sh
    E2E_DIR=$WORK/pg$v E2E_PORT=$((54400 + v))
    KEK=$WORK/kek$v.hex
    make_kek "$KEK"
    cluster_start "$E2E_DIR" "$E2E_PORT" "id_gen.order_no_kek_file = '$KEK'"
    trap 'cluster_stop "$E2E_DIR"' EXIT
    assert_eq "$(q postgres "SELECT current_setting('server_version_num')::int / 10000")" "$v" "  server is PostgreSQL $v"
    q postgres "CREATE EXTENSION id_gen" >/dev/null
    assert_eq "$(q postgres "SELECT extversion FROM pg_extension WHERE extname = 'id_gen'")" "$EXT_VERSION" "  CREATE EXTENSION id_gen"
    assert_eq "$(q postgres "SELECT id_gen.create_sequence('s')")" "s" "  create_sequence('s')"
    assert_eq "$(q postgres "SELECT string_agg(v::text, ' ' ORDER BY v) FROM (SELECT id_gen.next_segment_id('s') v FROM generate_series(1, 5)) x")" \
      "1 2 3 4 5" "  next_segment_id('s') x 5"
    assert_eq "$(q postgres "SELECT count(DISTINCT v) || ' ' || min(v) || ' ' || max(v) FROM (SELECT id_gen.next_segment_id('s') v FROM generate_series(1, 2500)) x")" \
      "2500 6 2505" "  2500 more across segment refills by the background worker: distinct, min, max"
    assert_eq "$(q postgres "SELECT id_gen.shard_gene(42::bigint)")" "16043" "  shard_gene(42::bigint)"
    assert_eq "$(q postgres "SELECT id_gen.shard_of(id_gen.gene_order_id('s', 42::bigint))")" "16043" "  gene_order_id('s', 42) carries the gene"
    assert_eq "$(q postgres "SELECT id_gen.create_order_no_key()")" "1" "  create_order_no_key()"
    local id no bad
    id=$(q postgres "SELECT id_gen.compose_id(16043, 7)")
    assert_eq "$id" "$((16043 << 47 | 7))" "  compose_id(16043, 7)"
    no=$(q postgres "SELECT id_gen.encode_order_no($id)")
    [[ $no =~ ^3eab01[0-9a-f]{2}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$ ]] \
      || fail "encode_order_no($id) = '$no': not a version-8 uuid starting with gene 3eab and key version 01"
    pass "  encode_order_no($id) = $no"
    assert_eq "$(q postgres "SELECT id_gen.decode_order_no('$no')")" "$id" "  decode_order_no(encode_order_no(id))"
    bad=${no:0:35}$(printf '%x' $(( (16#${no:35:1} + 1) % 16 )))
    if out=$(cpsql "$E2E_DIR" "$E2E_PORT" -v VERBOSITY=sqlstate -At -c "SELECT id_gen.decode_order_no('$bad')" 2>&1); then
      fail "a tampered order number decoded to '$out'"
    fi
    assert_eq "$out" "ERROR:  22023" "  a tampered order number is refused"
    if [ -n "$exp" ]; then
      mkdir -p "$exp"
      cp "$KEK" "$exp/kek.hex"
      q postgres "SELECT * FROM id_gen.export_order_no_keys()" > "$exp/order_no_keys.txt"
      echo "$id" > "$exp/id"; echo "$no" > "$exp/no"
    fi
  )
}

# install_check V DIR: the files of the unpacked tarball DIR are those installed in PostgreSQL V.
install_check() {
  local v=$1 dir=$2 c f n=0
  c=$(pg_config_of "$v")
  cmp "$dir/lib/id_gen.so" "$("$c" --pkglibdir)/id_gen.so" || fail "id_gen.so installed for PostgreSQL $v differs from the package's"
  for f in "$dir"/share/extension/*; do
    cmp "$f" "$("$c" --sharedir)/extension/$(basename "$f")" || fail "$(basename "$f") not installed for PostgreSQL $v"
    n=$((n + 1))
  done
  pass "  the package's id_gen.so and $n share/extension files are installed"
}

# --- (a) build ---------------------------------------------------------------------------------
if [ -z "${IDG_SKIP_BUILD:-}" ]; then
  log "(a) building the packages (scripts/package.sh --pg ${VERSIONS[*]})"
  bash scripts/package.sh --pg "${VERSIONS[@]}"
fi
rm -rf "$WORK"; mkdir -p "$WORK"

# --- (b) the PostgreSQL 15 Debian package ------------------------------------------------------
EXPORT=
if printf '%s\n' "${VERSIONS[@]}" | grep -qx 15; then
  log "(b) $(basename "$DEB")"
  [ -f "$DEB" ] || fail "$DEB missing"
  assert_eq "$(dpkg-deb -f "$DEB" Package) $(dpkg-deb -f "$DEB" Version) $(dpkg-deb -f "$DEB" Architecture) $(dpkg-deb -f "$DEB" Section)" \
    "$DEB_NAME $EXT_VERSION-1 amd64 database" "package, version, architecture, section"
  dpkg-deb -f "$DEB" Depends | grep -qE '(^|, )postgresql-15(,|$)' || fail "Depends lacks postgresql-15: $(dpkg-deb -f "$DEB" Depends)"
  pass "Depends: $(dpkg-deb -f "$DEB" Depends)"
  save_installed 15
  pass "removed the id_gen installed by cargo pgrx (saved in $SAVE/15: $(find "$SAVE/15" -type f | wc -l) files)"
  [ -z "$(installed_files 15)" ] || fail "id_gen files left in PostgreSQL 15: $(installed_files 15)"
  dpkg -i "$DEB" >"$WORK/dpkg-i.log" 2>&1 || { cat "$WORK/dpkg-i.log" >&2; fail "dpkg -i $DEB"; }
  dpkg -s "$DEB_NAME" | grep -q '^Status: install ok installed' || fail "dpkg -s: $DEB_NAME is not installed"
  mark_ours 15
  pass "dpkg -i $(basename "$DEB")"
  listed=$(dpkg -L "$DEB_NAME")
  for f in /usr/lib/postgresql/15/lib/id_gen.so /usr/share/postgresql/15/extension/id_gen.control \
           "/usr/share/postgresql/15/extension/id_gen--$EXT_VERSION.sql" $(cd sql && ls id_gen--*--*.sql | sed 's|^|/usr/share/postgresql/15/extension/|'); do
    grep -qx "$f" <<<"$listed" || fail "dpkg -L $DEB_NAME does not list $f"
    [ -f "$f" ] || fail "$f is not installed"
  done
  pass "dpkg -L lists the library, the control file, the install script and the update scripts"
  [ -z "$(dpkg -V "$DEB_NAME")" ] || fail "dpkg -V $DEB_NAME: $(dpkg -V "$DEB_NAME")"
  pass "dpkg -V: the installed files are the package's"
  smoke 15 "$WORK/pg_export"
  dpkg -r "$DEB_NAME" >"$WORK/dpkg-r.log" 2>&1 || { cat "$WORK/dpkg-r.log" >&2; fail "dpkg -r $DEB_NAME"; }
  ! dpkg -s "$DEB_NAME" 2>/dev/null | grep -q '^Status: install ok installed' || fail "still installed after dpkg -r"
  [ -z "$(installed_files 15)" ] || fail "files left after dpkg -r: $(installed_files 15)"
  pass "dpkg -r $DEB_NAME removes every file"
  restore_installed 15
  EXPORT=$WORK/pg_export
  SUMMARY+=("PASS $(printf '%-46s %5s' "$(basename "$DEB")" "$(size_of "$DEB")")  dpkg -i, dpkg -L/-V, smoke test on PostgreSQL $("$(pg_config_of 15)" --version | cut -d' ' -f2), dpkg -r")
  # The PostgreSQL 15 tarball is tested below on a PostgreSQL 15 without any id_gen too.
fi

# --- (c) the tarballs: install.sh into each PostgreSQL ------------------------------------------
for v in "${VERSIONS[@]}"; do
  name=id_gen-$EXT_VERSION-pg$v-linux-x86_64
  tarball=$PKG/$name.tar.gz
  log "(c) $name.tar.gz"
  [ -f "$tarball" ] || fail "$tarball missing"
  PG_CONFIG_V=$(pg_config_of "$v")
  [ -x "$PG_CONFIG_V" ] || fail "$PG_CONFIG_V missing (scripts/package.sh installs the tree)"
  rm -rf "$WORK/tar$v"; mkdir -p "$WORK/tar$v"
  tar -xzf "$tarball" -C "$WORK/tar$v"
  dir=$WORK/tar$v/$name
  expected=$(printf '%s\n' README.txt install.sh lib/id_gen.so share/extension/id_gen.control "share/extension/id_gen--$EXT_VERSION.sql" \
               $(cd sql && ls id_gen--*--*.sql | sed 's|^|share/extension/|') | sort)
  assert_eq "$(cd "$dir" && find . -type f | sed 's|^\./||' | sort | tr '\n' ' ')" "$(tr '\n' ' ' <<<"$expected")" "the tarball's files"
  [ -x "$dir/install.sh" ] || fail "install.sh is not executable"

  # install.sh refuses a pg_config of another major version, and writes nothing.
  other=$([ "$v" = 15 ] && echo 16 || echo 15)
  touch "$WORK/marker"; sleep 1
  if out=$("$dir/install.sh" "$(pg_config_of "$other")" 2>&1); then fail "install.sh for $v accepted PostgreSQL $other's pg_config: $out"; fi
  grep -q "this package is for PostgreSQL $v, but" <<<"$out" || fail "install.sh's refusal says: $out"
  written=$(find "$("$(pg_config_of "$other")" --pkglibdir)" "$("$(pg_config_of "$other")" --sharedir)/extension" -newer "$WORK/marker" -name 'id_gen*' 2>/dev/null)
  [ -z "$written" ] || fail "the refused install.sh wrote $written"
  pass "install.sh refuses PostgreSQL $other's pg_config: $(head -1 <<<"$out")"
  if out=$("$dir/install.sh" /nonexistent/pg_config 2>&1); then fail "install.sh accepted a missing pg_config"; fi
  pass "install.sh refuses a missing pg_config: $out"

  save_installed "$v"
  [ -z "$(installed_files "$v")" ] || fail "id_gen files left in PostgreSQL $v"
  "$dir/install.sh" "$PG_CONFIG_V" >"$WORK/install$v.log" 2>&1 || { cat "$WORK/install$v.log" >&2; fail "install.sh $PG_CONFIG_V"; }
  mark_ours "$v"
  pass "install.sh $PG_CONFIG_V: $(head -1 "$WORK/install$v.log")"
  install_check "$v" "$dir"
  smoke "$v"
  restore_installed "$v"
  SUMMARY+=("PASS $(printf '%-46s %5s' "$name.tar.gz" "$(size_of "$tarball")")  install.sh, smoke test on PostgreSQL $("$PG_CONFIG_V" --version | cut -d' ' -f2), wrong pg_config refused")
done

# --- (d) the MariaDB plugin --------------------------------------------------------------------
name=id_gen-mysql-$PLUGIN_VERSION-linux-x86_64
tarball=$PKG/$name.tar.gz
log "(d) $name.tar.gz"
[ -f "$tarball" ] || fail "$tarball missing"
mkdir -p "$WORK/mysql"; tar -xzf "$tarball" -C "$WORK/mysql"
dir=$WORK/mysql/$name
assert_eq "$(cd "$dir" && ls | tr '\n' ' ')" "README.txt id_gen_mysql.cnf install.sql libid_gen_mysql.so uninstall.sql " "the tarball's files"
syms=$(nm -D --defined-only "$dir/libid_gen_mysql.so" | awk '$2 == "T" {print $3}')
for f in "${UDFS[@]}"; do
  for s in "$f" "${f}_init" "${f}_deinit"; do grep -qx "$s" <<<"$syms" || fail "libid_gen_mysql.so does not export $s"; done
done
pass "libid_gen_mysql.so exports the ${#UDFS[@]} UDFs with their _init and _deinit (e.g. $(grep -x id_gen_shard_gene <<<"$syms"))"
for f in "${UDFS[@]}"; do
  grep -qE "^CREATE FUNCTION $f +RETURNS (INTEGER|STRING) +SONAME 'libid_gen_mysql.so';$" "$dir/install.sql" || fail "install.sql lacks $f"
done
assert_eq "$(grep -c '^CREATE FUNCTION' "$dir/install.sql")" "${#UDFS[@]}" "install.sql creates the seven functions"
assert_eq "$(grep -v '^\s*#' "$dir/id_gen_mysql.cnf" | grep -v '^\s*$' | sed 's/ *= .*//' | tr '\n' ' ')" \
  "[id_gen] order_no_kek_file order_no_keys_file " "id_gen_mysql.cnf sets the two keys"

# A throwaway MariaDB loads the library as README.txt says.
M=$WORK/maria
maria_start "$M" 54419
install -o mysql -g mysql -m 0444 "$dir/libid_gen_mysql.so" "$M/plugin/libid_gen_mysql.so"
mcli "$M" < "$dir/install.sql"
assert_eq "$(mcli "$M" -e "SELECT COUNT(*) FROM mysql.func WHERE dl = 'libid_gen_mysql.so'")" "${#UDFS[@]}" "install.sql: seven functions in mysql.func"
assert_eq "$(mcli "$M" -e "SELECT id_gen_shard_gene(42), id_gen_shard_gene('alice'), id_gen_compose_id(16043, 7)" | tr '\t' ' ')" \
  "16043 13795 $((16043 << 47 | 7))" "id_gen_shard_gene(42), ('alice'), id_gen_compose_id(16043, 7)"
# The example .cnf as shipped parses; it names key files that do not exist here.
install -m 0644 "$dir/id_gen_mysql.cnf" "$M/plugin/id_gen_mysql.cnf"
if out=$(mcli "$M" -e "SELECT id_gen_encode_order_no(1)" 2>&1); then fail "encode without key files returned '$out'"; fi
grep -q '/etc/mysql/id_gen/kek.hex' <<<"$out" || fail "the example .cnf was not read as expected: $out"
pass "the example id_gen_mysql.cnf is read (its KEK path is reported missing: $out)"
if [ -n "$EXPORT" ]; then
  mkdir -p "$M/keys"
  cp "$EXPORT/kek.hex" "$EXPORT/order_no_keys.txt" "$M/keys/"
  chown -R mysql:mysql "$M/keys"; chmod 0700 "$M/keys"; chmod 0400 "$M/keys"/*
  sed -e "s|^order_no_kek_file *=.*|order_no_kek_file  = $M/keys/kek.hex|" \
      -e "s|^order_no_keys_file *=.*|order_no_keys_file = $M/keys/order_no_keys.txt|" "$dir/id_gen_mysql.cnf" > "$M/plugin/id_gen_mysql.cnf"
  chmod 0644 "$M/plugin/id_gen_mysql.cnf"
  id=$(cat "$EXPORT/id") no=$(cat "$EXPORT/no")
  assert_eq "$(mcli "$M" -e "SELECT id_gen_decode_order_no('$no')")" "$id" "MariaDB decodes PostgreSQL 15's order number (example .cnf, keys exported by the .deb's server)"
  assert_eq "$(mcli "$M" -e "SELECT id_gen_encode_order_no($id)")" "$no" "MariaDB encodes the same number"
fi
mcli "$M" < "$dir/uninstall.sql"
assert_eq "$(mcli "$M" -e "SELECT COUNT(*) FROM mysql.func WHERE dl = 'libid_gen_mysql.so'")" "0" "uninstall.sql drops them"
maria_stop "$M"
SUMMARY+=("PASS $(printf '%-46s %5s' "$name.tar.gz" "$(size_of "$tarball")")  files, UDF symbols, install.sql/uninstall.sql and the example .cnf on MariaDB $(mariadbd --version | grep -o '[0-9]*\.[0-9]*\.[0-9]*' | head -1)")

log "packages tested in ${SECONDS}s"
printf '%s\n' "${SUMMARY[@]}"
