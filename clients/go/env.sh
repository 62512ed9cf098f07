# Sourced by test.sh and conformance: the Go environment of an offline build against Debian's
# Go packages (see go.mod). Caches and the built tool live in the repository's target/go, never
# in $HOME; GOPROXY=off and -mod=readonly make a missing package an error, not a download.
# Needs: golang-go (1.19+), golang-github-jackc-pgx-v4-dev.
go_client_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
go_target_dir=$(cd "$go_client_dir/../.." && pwd)/target/go
export GOPATH="$go_target_dir/path"
export GOCACHE="$go_target_dir/cache"
export GOFLAGS=-mod=readonly
export GOPROXY=off
export GOSUMDB=off
export GOTOOLCHAIN=local
export GOTELEMETRY=off
export CGO_ENABLED=0
mkdir -p "$GOPATH" "$GOCACHE"
if ! command -v go >/dev/null 2>&1; then
  echo "clients/go: no go command (install golang-go and golang-github-jackc-pgx-v4-dev)" >&2
  exit 1
fi
if [ ! -d /usr/share/gocode/src/github.com/jackc/pgx/v4/pgxpool ]; then
  echo "clients/go: pgx v4 is missing (install golang-github-jackc-pgx-v4-dev)" >&2
  exit 1
fi
