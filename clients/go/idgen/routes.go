// The route snapshot, the SQL of docs/routing-protocol.md (the same as every other client's), the
// reading of a shard's routing protocol and the retry decisions, none of it I/O.
//
// Invariants:
//   - A routeTable is immutable: the ranges and their version are one snapshot, replaced whole.
//   - A lookup is the ceiling entry on upper_gene, and a gene below that range's lower_gene has
//     no route.
//   - After IG001 the routes are re-read before the next attempt, after IG002 every third time,
//     never after a lost connection (the routes said nothing new); the wait before attempt n + 1
//     is min(base * 2^n, max), jittered to [1/2, 1] of it.

package idgen

import (
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"time"
)

const (
	routesChannel = "id_gen_routes"
	routesSQL     = "SELECT lower_gene, upper_gene, shard, version FROM id_gen.route_map ORDER BY lower_gene"
	// One snapshot: the version, only when there are still no routes (else read them again).
	emptyRoutesVersionSQL = "SELECT id_gen.route_version() AS version WHERE NOT EXISTS (SELECT 1 FROM id_gen.route_map)"
	routeVersionSQL       = "SELECT id_gen.route_version() AS version"
)

// declaredSQL is sql with the route version it was routed with in a leading comment
// (docs/routing-protocol.md §3): the shard checks it for that statement, with no second
// statement and no session state.
func declaredSQL(version int64, sql string) string {
	return "/* id_gen.route_version=" + strconv.FormatInt(version, 10) + " */ " + sql
}

// routingProtocolSQL asks a shard whether it takes the claim on BEGIN: '2' from id_gen 0.7.16 on,
// NULL before (docs/routing-protocol.md §3). Sent in autocommit, so it works through a
// transaction-mode pooler too.
const routingProtocolSQL = "SELECT pg_catalog.current_setting('id_gen.routing_protocol', true)"

// claimsOnBeginSince is the first routing protocol whose shards take the claim on BEGIN.
const claimsOnBeginSince = 2

// claimsOnBegin reads the answer of routingProtocolSQL (NULL as ""): anything but an integer
// of at least claimsOnBeginSince means the old form, which every shard takes.
func claimsOnBegin(routingProtocol string) bool {
	protocol, err := strconv.Atoi(routingProtocol)
	return err == nil && protocol >= claimsOnBeginSince
}

// claimSQL is the claim as one simple-protocol message: no round trip over a plain BEGIN. On
// BEGIN is the claim as a leading comment of BEGIN itself, for the shards that take it (a shard
// older than 0.7.16 ignores the comment: unclaimed); the other form, a SELECT after the BEGIN,
// costs a statement more.
func claimSQL(gene uint16, version int64, onBegin bool) string {
	if onBegin {
		return "/* id_gen.route_claim=" + strconv.Itoa(int(gene)) + "," + strconv.FormatInt(version, 10) + " */ BEGIN"
	}
	return "BEGIN; SELECT id_gen.route_claim(" + strconv.Itoa(int(gene)) + ", " + strconv.FormatInt(version, 10) + ")"
}

// RouteRange is one route: genes Lower..Upper (inclusive) live on Shard.
type RouteRange struct {
	Lower, Upper uint16
	Shard        string
}

// routeTable is one snapshot of the routes: ranges sorted by Lower, and their version.
type routeTable struct {
	ranges  []RouteRange
	version int64
}

// shardFor is the shard of gene by these routes, or a *NoRouteError.
func (t *routeTable) shardFor(gene uint16) (string, error) {
	i := sort.Search(len(t.ranges), func(i int) bool { return t.ranges[i].Upper >= gene })
	if i == len(t.ranges) || t.ranges[i].Lower > gene {
		return "", &NoRouteError{Gene: gene, Version: t.version}
	}
	return t.ranges[i].Shard, nil
}

// routeRow is one row of routesSQL.
type routeRow struct {
	lower, upper int64
	shard        string
	version      int64
}

// tableFromRows checks the rows of routesSQL (not empty, ordered, genes in range, not
// overlapping) and makes their snapshot.
func tableFromRows(rows []routeRow) (*routeTable, error) {
	t := &routeTable{version: rows[0].version}
	for i, r := range rows {
		if r.lower < 0 || r.upper > MaxGene || r.lower > r.upper || (i > 0 && r.lower <= rows[i-1].upper) {
			return nil, fmt.Errorf("idgen: a route range %d..%d (%s) out of order or out of 0..%d", r.lower, r.upper, r.shard, MaxGene)
		}
		t.ranges = append(t.ranges, RouteRange{Lower: uint16(r.lower), Upper: uint16(r.upper), Shard: r.shard})
	}
	return t, nil
}

// retryReason is why an attempt is retried, or noRetry.
type retryReason int

const (
	noRetry     retryReason = iota
	routeMoved              // IG001
	routeFenced             // IG002
	connLost                // a shard connection refused or lost before COMMIT was sent
)

// routeReasonOf is routeMoved or routeFenced when err carries IG001 or IG002, else noRetry.
func routeReasonOf(err error) retryReason {
	switch SQLState(err) {
	case CodeRouteChanged:
		return routeMoved
	case CodeRouteFenced:
		return routeFenced
	}
	return noRetry
}

// rereadsAfter: whether the routes are re-read before the attempt after attempt n failed so.
func rereadsAfter(reason retryReason, attempt int) bool {
	return reason == routeMoved || (reason == routeFenced && attempt%3 == 2)
}

// backoffDelay is the wait after attempt n: min(base * 2^n, max), jittered to [1/2, 1] of it.
func backoffDelay(attempt int, base, max time.Duration) time.Duration {
	d := max
	if attempt < 30 && base<<attempt < max {
		d = base << attempt
	}
	return d/2 + time.Duration(rand.Int63n(int64(d/2)+1))
}
