module github.com/id-gen/id_gen/clients/go

go 1.19

// Built offline against Debian's Go packages (golang-github-jackc-pgx-v4-dev and its
// dependencies): every module a package of this one imports is required here at the version
// Debian ships, and replaced by its source directory under /usr/share/gocode/src. With
// GOFLAGS=-mod=readonly and GOPROXY=off (env.sh) the go command reads only these go.mod files
// and never looks a module up. To build against the module proxy instead (a fixed pgx, see
// README.md), drop the replace block and run `go mod tidy`.

require (
	github.com/jackc/pgconn v1.11.0
	github.com/jackc/pgproto3/v2 v2.2.0
	github.com/jackc/pgx/v4 v4.15.0
)

require (
	github.com/jackc/chunkreader/v2 v2.0.1 // indirect
	github.com/jackc/pgio v1.0.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20200714003250-2b9c44734f2b // indirect
	github.com/jackc/pgtype v1.10.0 // indirect
	github.com/jackc/puddle v1.2.1 // indirect
	golang.org/x/crypto v0.4.0 // indirect
	golang.org/x/text v0.7.0 // indirect
)

replace (
	github.com/jackc/chunkreader/v2 => /usr/share/gocode/src/github.com/jackc/chunkreader/v2
	github.com/jackc/pgconn => /usr/share/gocode/src/github.com/jackc/pgconn
	github.com/jackc/pgio => /usr/share/gocode/src/github.com/jackc/pgio
	github.com/jackc/pgpassfile => /usr/share/gocode/src/github.com/jackc/pgpassfile
	github.com/jackc/pgproto3/v2 => /usr/share/gocode/src/github.com/jackc/pgproto3/v2
	github.com/jackc/pgservicefile => /usr/share/gocode/src/github.com/jackc/pgservicefile
	github.com/jackc/pgtype => /usr/share/gocode/src/github.com/jackc/pgtype
	github.com/jackc/pgx/v4 => /usr/share/gocode/src/github.com/jackc/pgx/v4
	github.com/jackc/puddle => /usr/share/gocode/src/github.com/jackc/puddle
	golang.org/x/crypto => /usr/share/gocode/src/golang.org/x/crypto
	golang.org/x/text => /usr/share/gocode/src/golang.org/x/text
)
