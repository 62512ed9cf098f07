#!/usr/bin/env bash
# Runs the SQL examples of the user docs against a throwaway server, so that they cannot
# drift from what id_gen does.
#
#   scripts/check-doc-examples.sh [FILE.md ...]   default: README.md, docs/reference.md,
#                                                 the guides (docs/guide/) and docs/operations.md
#
# Every ```sql block of a file runs, in order, in one fresh database per file (a block may
# use what an earlier one created; id_gen is installed first unless the first block
# installs it), as a superuser, except:
#   * a block right after a line `<!-- example not run: REASON -->` (it needs another
#     database product, or an older version): reported with its reason, not run;
#   * a block right after `<!-- example on a cluster: NAME -->` (a coordinator and shards):
#     reported, and run by tests/cluster/test_guide_examples.py on real servers;
#   * a block right after `<!-- example on its own server: NAME -->` runs in a database of
#     its own for NAME (the guide's other server: a central authority, a node);
#   * a line `-- as ROLE` switches to that role (SET ROLE) for the lines after it, `-- as a
#     superuser` back (RESET ROLE).
# A block passes when the errors it raised are exactly those it documents, each as a
# comment line `-- ERROR:  <message>` (the message as psql prints it, verbosity default).
# Fails when a block raises an error it does not document, or documents one it did not
# raise. Tier 2 of scripts/test.sh runs it.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$REPO_ROOT"
FILES=("$@")
[ ${#FILES[@]} -eq 0 ] && FILES=(README.md docs/reference.md docs/guide/*.md docs/operations.md)
DIR=/tmp/idg_doc_examples PORT=54397
make_kek /tmp/idg_doc_examples_kek.hex
cluster_start "$DIR" "$PORT" "id_gen.order_no_kek_file = '/tmp/idg_doc_examples_kek.hex'"
trap 'cluster_stop "$DIR"' EXIT
WORK=$(mktemp -d); chmod 755 "$WORK"

# blocks FILE: writes WORK/<n>.sql per block and WORK/<n>.meta ("run LINE SERVER" or
# "skip LINE REASON"); prints how many blocks there are.
blocks() {
  rm -f "$WORK"/*.sql "$WORK"/*.meta
  awk -v w="$WORK" '
    /^<!-- example not run: .* -->$/ { reason = $0; sub(/^<!-- example not run: /, "", reason); sub(/ -->$/, "", reason); next }
    /^<!-- example on a cluster: .* -->$/ { reason = "runs on a cluster: tests/cluster/test_guide_examples.py"; next }
    /^<!-- example on its own server: [a-z0-9_]+ -->$/ { server = $7; next }
    /^```sql$/ { n++; inblock = 1; f = w "/" n ".sql"; printf "" > f
                 if (reason != "") print "skip " FNR " " reason > (w "/" n ".meta")
                 else print "run " FNR " " (server == "" ? "main" : server) > (w "/" n ".meta")
                 reason = ""; server = ""; next }
    /^```/ && inblock { inblock = 0; next }
    inblock { print > f; next }
    NF { reason = ""; server = "" }
    END { print n + 0 }' "$1"
}

failed=0 ran=0 skipped=0
for file in "${FILES[@]}"; do
  n=$(blocks "$file")
  stem="idg_docs_$(basename "$file" .md | tr 'A-Z' 'a-z' | tr -c 'a-z0-9\n' '_')"
  made=" "
  for i in $(seq 1 "$n"); do
    read -r what line reason < "$WORK/$i.meta"
    if [ "$what" = skip ]; then
      echo "  not run: $file:$line ($reason)"; skipped=$((skipped + 1)); continue
    fi
    # One database per file, and one more per "server" a block names. The guides start from
    # an installed extension, unless the database's first block installs it.
    db="${stem}_$reason"
    if [[ "$made" != *" $db "* ]]; then
      cpsql "$DIR" "$PORT" -q -c "CREATE DATABASE $db" >/dev/null
      grep -q '^CREATE EXTENSION id_gen;' "$WORK/$i.sql" || cpsql "$DIR" "$PORT" -q -d "$db" -c "CREATE EXTENSION id_gen" >/dev/null
      made+="$db "
    fi
    # -- as ROLE / -- as a superuser: SET ROLE / RESET ROLE.
    sed -E -e 's/^-- as a superuser.*$/RESET ROLE;/' -e 's/^-- as ([a-z_][a-z0-9_]*)\b.*$/SET ROLE \1;/' \
      "$WORK/$i.sql" > "$WORK/$i.run.sql"
    grep -E '^-- ERROR:  ' "$WORK/$i.sql" | sed 's/^-- //' | sort > "$WORK/$i.want" || true
    rc=0
    timeout 300 env -u RUST_BACKTRACE PGOPTIONS="-c statement_timeout=120s" runuser -u postgres -- "$PG_BIN/psql" -X -q \
      -h "$DIR" -p "$PORT" -d "$db" -v VERBOSITY=default -f "$WORK/$i.run.sql" > "$WORK/$i.out" 2>&1 || rc=$?
    if [ "$rc" -ne 0 ]; then   # (errors of statements leave it 0: a connection or file failure, or the timeout)
      echo "FAIL: $file:$line: psql ended with $rc:" >&2; sed 's/^/    /' "$WORK/$i.out" >&2
      failed=$((failed + 1)); continue
    fi
    sed -nE 's/^psql:[^ ]*: (ERROR:  .*)$/\1/p' "$WORK/$i.out" | sort > "$WORK/$i.got"
    if diff -q "$WORK/$i.want" "$WORK/$i.got" >/dev/null; then
      echo "  ok: $file:$line ($(wc -l < "$WORK/$i.got") documented errors)"; ran=$((ran + 1))
    else
      echo "FAIL: $file:$line: the errors differ from those documented (-- ERROR: lines):" >&2
      diff "$WORK/$i.want" "$WORK/$i.got" | sed 's/^/    /' >&2 || true
      failed=$((failed + 1))
    fi
  done
done
rm -rf "$WORK"
echo "doc examples: $ran run as documented, $skipped not run (reasons above), $failed failed"
[ "$failed" -eq 0 ]
