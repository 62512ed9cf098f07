#!/usr/bin/env bash
# Builds the Java client with plain javac (offline, against Debian's jars in /usr/share/java;
# pom.xml is for users, not used here) and runs its JUnit 5 tests.
#   ./build.sh           compiles main, conformance and tests, runs every test; exits non-zero
#                        when a compile or a test fails; prints the count of tests
#   ./build.sh classes   compiles main and conformance into target/ when a source is newer
#                        than the last build (what ./conformance needs); prints nothing else
#   ./build.sh classpath prints the runtime classpath of the conformance tool
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
jars=/usr/share/java
target="$here/target"
runtime_cp="$jars/postgresql.jar:$jars/HikariCP.jar:$jars/slf4j-api.jar:$jars/slf4j-nop.jar"
junit="$jars/junit-platform-console-standalone.jar"
javac_flags=(--release 11 -encoding UTF-8 -Xlint:all -Werror -g)

for jar in postgresql.jar HikariCP.jar slf4j-api.jar slf4j-nop.jar; do
  [ -f "$jars/$jar" ] || { echo "build.sh: $jars/$jar is missing (scripts/common.sh installs it)" >&2; exit 1; }
done

# Compiles every .java under the source directories $2.. into $1 (emptied first).
compile() {
  local out=$1 cp=$2
  shift 2
  rm -rf "$out"
  mkdir -p "$out"
  find "$@" -name '*.java' > "$out.sources"
  javac "${javac_flags[@]}" -cp "$cp" -d "$out" "@$out.sources"
}

# Whether any source under the directories $2.. is newer than the stamp file $1.
stale() {
  local stamp=$1
  shift
  [ ! -f "$stamp" ] || [ -n "$(find "$@" -newer "$stamp" -print -quit)" ]
}

build_classes() {
  mkdir -p "$target"
  exec 9>"$target/build.lock" # (one build at a time: ./conformance may start several at once)
  flock -w 600 9 || { echo "build.sh: the build lock was not free within 600 s" >&2; exit 1; }
  if stale "$target/classes.stamp" "$here/src/main" "$here/src/conformance" "$here/build.sh"; then
    touch "$target/classes.stamp.new"
    compile "$target/classes" "$runtime_cp" "$here/src/main/java"
    compile "$target/conformance-classes" "$runtime_cp:$target/classes" "$here/src/conformance/java"
    mv "$target/classes.stamp.new" "$target/classes.stamp"
  fi
  flock -u 9
}

case "${1:-test}" in
  classes)
    build_classes
    ;;
  classpath)
    echo "$target/classes:$target/conformance-classes:$runtime_cp"
    ;;
  test)
    [ -f "$junit" ] || { echo "build.sh: $junit is missing (Debian package junit5)" >&2; exit 1; }
    build_classes
    compile "$target/test-classes" "$target/classes:$target/conformance-classes:$runtime_cp:$junit" "$here/src/test/java"
    report="$target/junit.out"
    status=0
    java -Didgen.clients.dir="$here/.." -jar "$junit" \
      --class-path "$target/test-classes:$target/classes:$target/conformance-classes:$runtime_cp" \
      --scan-class-path "$target/test-classes" --disable-banner --disable-ansi-colors --details=tree \
      --config=junit.jupiter.execution.timeout.default=60s > "$report" 2>&1 || status=$?
    if [ "$status" -ne 0 ]; then
      cat "$report"
    else
      grep -E '^\[ +[0-9]+ tests (successful|failed|found) +\]' "$report" || true
    fi
    found=$(sed -nE 's/^\[ +([0-9]+) tests found +\].*/\1/p' "$report")
    passed=$(sed -nE 's/^\[ +([0-9]+) tests successful +\].*/\1/p' "$report")
    echo "java client: ${passed:-0} of ${found:-0} tests passed (report: $report)"
    exit "$status"
    ;;
  *)
    echo "usage: build.sh [test|classes|classpath]" >&2
    exit 2
    ;;
esac
