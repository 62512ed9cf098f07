#!/usr/bin/env bash
# The Go client's checks, offline (env.sh: Debian's Go packages, no module proxy): gofmt,
# go vet and go test of every package (the genes against clients/gene-vectors.json, every
# scenario of clients/protocol-scenarios.json against the fake driver, the pgx driver against a
# scripted server on a loopback socket, the conformance tool). No PostgreSQL needed.
# Extra arguments go to go test (e.g. -race, -run Scenarios, -v). Exits non-zero on a failure.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/env.sh"
cd "$here"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "clients/go: not gofmt-formatted: $unformatted" >&2
  exit 1
fi
go vet ./...
if [[ " $* " == *" -race "* ]]; then export CGO_ENABLED=1; fi
go test -count=1 "$@" ./...
