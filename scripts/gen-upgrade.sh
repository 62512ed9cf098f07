#!/usr/bin/env bash
# Writes the update script to the current version, sql/id_gen--<from>--<to>.sql, from the
# hand-written catalog changes in sql/upgrade/<from>--<to>.sql, the new tables of
# sql/install/cluster_catalog.sql and the code files the install script is built from (CREATE OR
# REPLACE throughout), so that no copy of the code is kept by hand. <to> is
# default_version in id_gen.control; <from> is named by the one hand-written delta that
# ends at <to>. Released scripts (update scripts to older versions, their hand deltas and
# the released install scripts kept in tests/upgrade/) are frozen: sql/released.sha256
# lists their checksums.
#   scripts/gen-upgrade.sh           write it
#   scripts/gen-upgrade.sh --check   fail if the committed script differs, or a released
#                                    file is missing, changed or not listed (run by
#                                    scripts/test.sh after it installs the build, tier 2)
#   scripts/gen-upgrade.sh --check-frozen   only the released files (tier 1)
#   scripts/gen-upgrade.sh --freeze  after a version is released and default_version
#                                    raised: add the files of the released versions to
#                                    sql/released.sha256 (never changes a listed checksum)
# tests/e2e/08_upgrade.sh then checks that an updated schema equals a fresh install.
# See sql/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
TO=$(sed -n "s/^default_version = '\(.*\)'$/\1/p" id_gen.control)
deltas=(sql/upgrade/*--"$TO".sql)
[ ${#deltas[@]} -eq 1 ] && [ -f "${deltas[0]}" ] \
  || { echo "want exactly one sql/upgrade/<from>--$TO.sql (the hand-written delta to $TO); found: ${deltas[*]}" >&2; exit 1; }
FROM=$(basename "${deltas[0]}" .sql); FROM=${FROM%--*}
# The code files, in the order the install script loads them: every extension_sql_file! of
# src/lib.rs under sql/cluster/ (one list for both scripts).
mapfile -t CODE < <(grep -o '"\.\./sql/cluster/[^"]*\.sql"' src/lib.rs | tr -d '"' | sed 's|^\.\./||')
[ ${#CODE[@]} -gt 0 ] || { echo "no sql/cluster/ files named by extension_sql_file! in src/lib.rs" >&2; exit 1; }
for f in "${CODE[@]}"; do [ -f "$f" ] || { echo "src/lib.rs names $f, which does not exist" >&2; exit 1; }; done
# Every code file must be in that list: a file left out would be missing from updates.
# (A lookup, not `printf | grep -q`: grep -q exits at its first match, and under pipefail the
# SIGPIPE that printf may then get failed this check at random on a busy machine.)
declare -A LOADED
for f in "${CODE[@]}"; do LOADED[$f]=1; done
while read -r f; do
  [ -n "${LOADED[$f]:-}" ] || { echo "$f is not loaded by src/lib.rs (extension_sql_file!)" >&2; exit 1; }
done < <(find sql/cluster -name '*.sql' | sort)
# The catalog tables new in $TO: sql/install/cluster_catalog.sql from the line after this marker
# on, so that the update creates them from the same text as the install script.
NEW_CATALOG_MARKER="-- @new-in-$TO"
OUT=sql/id_gen--$FROM--$TO.sql
FROZEN=sql/released.sha256
# A line `-- @rust-function <name>` of the delta declares a new Rust (C) function: it becomes
# the declaration pgrx wrote into the install script of this build (CREATE OR REPLACE), and
# the COMMENT, GRANT and REVOKE lines of sql/install/finalize.sql for that function, so that
# an update declares it from the same sources as an install. The install script is
# $INSTALL_SCRIPT, or the one installed for PG_CONFIG (build and install first). A line
# `-- @finalize-of <name>` gives only those lines of sql/install/finalize.sql (a changed
# COMMENT or grant of a Rust function that exists already).
install_script() {
  if [ -n "${INSTALL_SCRIPT:-}" ]; then echo "$INSTALL_SCRIPT"; return; fi
  local pgc=${PG_CONFIG:-$(command -v pg_config || echo /usr/lib/postgresql/15/bin/pg_config)}
  echo "$("$pgc" --sharedir)/extension/id_gen--$TO.sql"
}
rust_declaration() {
  local name=$1 script block
  script=$(install_script)
  [ -f "$script" ] || { echo "-- @rust-function $name needs the install script of this build ($script): build and install first" >&2; return 1; }
  block=$(awk -v want="'MODULE_PATHNAME', '${name}_wrapper';" '
    /^\/\* <begin connected objects> \*\/$/ { n = 0; next }
    /^\/\* <\/end connected objects> \*\/$/ { if (hit) { for (i = 1; i <= n; i++) print buf[i]; exit } next }
    { buf[++n] = $0; if (index($0, want)) hit = 1 }' "$script")
  [ -n "$block" ] || { echo "-- @rust-function $name: no function with symbol ${name}_wrapper in $script" >&2; return 1; }
  printf '%s\n' "$block" | sed 's/^CREATE  FUNCTION /CREATE OR REPLACE FUNCTION /'
  finalize_lines "$name"
}
finalize_lines() {
  local name=$1
  grep -E "^(COMMENT ON|GRANT [A-Z ]+ ON|REVOKE [A-Z ]+ ON) FUNCTION id_gen\.$name\(" sql/install/finalize.sql \
    || { echo "$name: no COMMENT ON FUNCTION id_gen.$name in sql/install/finalize.sql" >&2; return 1; }
}
# A line `-- @after-code` splits the delta: what follows it runs after the code files (data
# copied into a table that replaces another, once the views and functions over it exist).
# expand_delta FILE before|after prints one part.
AFTER_CODE_MARKER="-- @after-code"
expand_delta() {
  local line part=before
  while IFS= read -r line; do
    if [ "$line" = "$AFTER_CODE_MARKER" ]; then
      part=after
      continue
    fi
    [ "$part" = "$2" ] || continue
    if [[ $line =~ ^--\ @rust-function\ ([a-z0-9_]+)$ ]]; then
      rust_declaration "${BASH_REMATCH[1]}" || return 1
    elif [[ $line =~ ^--\ @finalize-of\ ([a-z0-9_]+)$ ]]; then
      finalize_lines "${BASH_REMATCH[1]}" || return 1
    else
      printf '%s\n' "$line"
    fi
  done < "$1"
}
generate() {
  cat <<HEAD
-- id_gen $FROM -> $TO (what changes: the hand-written part, next).
-- GENERATED by scripts/gen-upgrade.sh from sql/upgrade/$FROM--$TO.sql and ${CODE[*]}:
-- do not edit; edit those and run the script.

\\echo Use "ALTER EXTENSION id_gen UPDATE TO '$TO'" to load this file. \\quit

HEAD
  expand_delta "sql/upgrade/$FROM--$TO.sql" before || return 1
  grep -qxF -- "$NEW_CATALOG_MARKER" sql/install/cluster_catalog.sql || { echo "no line $NEW_CATALOG_MARKER in sql/install/cluster_catalog.sql" >&2; return 1; }
  printf '\n-- ===== sql/install/cluster_catalog.sql (the tables after %s) =====\n' "$NEW_CATALOG_MARKER"
  awk -v m="$NEW_CATALOG_MARKER" 'seen { print } $0 == m { seen = 1 }' sql/install/cluster_catalog.sql
  local f
  for f in "${CODE[@]}"; do
    printf '\n-- ===== %s =====\n' "$f"
    cat "$f"
  done
  if grep -qxF -- "$AFTER_CODE_MARKER" "sql/upgrade/$FROM--$TO.sql"; then
    printf '\n-- ===== sql/upgrade/%s--%s.sql (after %s) =====\n' "$FROM" "$TO" "$AFTER_CODE_MARKER"
    expand_delta "sql/upgrade/$FROM--$TO.sql" after || return 1
  fi
}
# The released files: every update script and hand delta that does not end at $TO, and
# every released install script kept for the update tests.
released() {
  local f
  for f in sql/id_gen--*--*.sql sql/upgrade/*--*.sql tests/upgrade/id_gen--*.sql; do
    case "$f" in *--"$TO".sql) continue ;; esac
    echo "$f"
  done | sort
}
check_frozen() {
  local bad=0 f sum
  while read -r f; do
    sum=$(awk -v f="$f" '$2 == f { print $1 }' "$FROZEN")
    if [ -z "$sum" ]; then
      echo "$f is released (it does not end at $TO) but not in $FROZEN: run scripts/gen-upgrade.sh --freeze" >&2; bad=1
    elif [ "$(sha256sum "$f" | cut -d' ' -f1)" != "$sum" ]; then
      echo "$f differs from its released checksum in $FROZEN: released scripts are never edited (write the change into the next update)" >&2; bad=1
    fi
  done < <(released)
  while read -r sum f; do
    [ -f "$f" ] || { echo "$f is listed in $FROZEN but missing" >&2; bad=1; }
  done < "$FROZEN"
  return $bad
}
case "${1:-}" in
  --check)
    check_frozen
    generated=$(generate) || exit 1
    if [ "$generated" != "$(cat "$OUT")" ]; then
      echo "$OUT is not what scripts/gen-upgrade.sh generates; run it and commit the result" >&2
      exit 1
    fi
    echo "$OUT matches its sources; $(wc -l < "$FROZEN") released files match $FROZEN"
    ;;
  --check-frozen)
    check_frozen
    echo "$(wc -l < "$FROZEN") released files match $FROZEN"
    ;;
  --freeze)
    while read -r f; do
      awk -v f="$f" '$2 == f { found = 1 } END { exit !found }' "$FROZEN" 2>/dev/null || sha256sum "$f" >> "$FROZEN"
    done < <(released)
    sort -k2 -o "$FROZEN" "$FROZEN"
    check_frozen
    echo "$FROZEN lists $(wc -l < "$FROZEN") released files"
    ;;
  "")
    generate > "$OUT.tmp" || { rm -f "$OUT.tmp"; exit 1; }
    mv "$OUT.tmp" "$OUT"
    echo "wrote $OUT"
    ;;
  *) echo "usage: scripts/gen-upgrade.sh [--check | --check-frozen | --freeze]" >&2; exit 2 ;;
esac
