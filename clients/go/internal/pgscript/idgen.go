// id_gen's statements on the scripted server: the coordinator's route reads (id_gen.route_map,
// id_gen.route_version()) and a shard's: the probe of its routing protocol and the claim in both
// forms ("BEGIN; SELECT id_gen.route_claim(gene, version)" and "/* id_gen.route_claim=gene,version
// */ BEGIN"), by one route table that a test may change.
//
// Invariants: a claim with a version older than the table's fails with IG001, as on a shard
// whose routes changed (a claim on BEGIN that fails opens no transaction); the routes and their
// version are read under one lock (one snapshot). A shard whose routing protocol is not 2 or
// more (older than id_gen 0.7.16) ignores a claim on BEGIN: a plain BEGIN.

package pgscript

import (
	"strconv"
	"strings"
	"sync"
)

// Range is one route: genes Lower..Upper live on Shard.
type Range struct {
	Lower, Upper int
	Shard        string
}

// IDGen is the route table the server answers by.
type IDGen struct {
	mu              sync.Mutex
	ranges          []Range
	version         int64
	routingProtocol string // what the probe answers
}

// ServeIDGen makes the server answer id_gen's statements by ranges at version 1, as a shard of
// routing protocol 2 (id_gen 0.7.16 or later).
func (s *Server) ServeIDGen(ranges []Range) *IDGen {
	g := &IDGen{ranges: ranges, version: 1, routingProtocol: "2"}
	s.Handle("SELECT lower_gene, upper_gene, shard, version FROM id_gen.route_map", Handler{
		Columns: []Column{{"lower_gene", Int4}, {"upper_gene", Int4}, {"shard", Text}, {"version", Int8}},
		Run: func(string, []string) Result {
			g.mu.Lock()
			defer g.mu.Unlock()
			var rows [][]string
			for _, r := range g.ranges {
				rows = append(rows, []string{strconv.Itoa(r.Lower), strconv.Itoa(r.Upper), r.Shard, strconv.FormatInt(g.version, 10)})
			}
			return Result{Rows: rows}
		},
	})
	version := func(onlyWithoutRoutes bool) func(string, []string) Result {
		return func(string, []string) Result {
			g.mu.Lock()
			defer g.mu.Unlock()
			if onlyWithoutRoutes && len(g.ranges) > 0 {
				return Result{}
			}
			return Result{Rows: [][]string{{strconv.FormatInt(g.version, 10)}}}
		}
	}
	s.Handle("SELECT id_gen.route_version() AS version WHERE NOT EXISTS", Handler{
		Columns: []Column{{"version", Int8}}, Run: version(true)})
	s.Handle("SELECT id_gen.route_version()", Handler{Columns: []Column{{"version", Int8}}, Run: version(false)})
	s.Handle("SELECT pg_catalog.current_setting('id_gen.routing_protocol', true)", Handler{
		Columns: []Column{{"current_setting", Text}},
		Run: func(string, []string) Result {
			g.mu.Lock()
			defer g.mu.Unlock()
			return Result{Rows: [][]string{{g.routingProtocol}}}
		},
	})
	s.Handle("SELECT id_gen.route_claim(", Handler{
		Columns: []Column{{"route_claim", Int8}},
		Run: func(sql string, _ []string) Result {
			claimed, _ := strconv.ParseInt(strings.TrimSuffix(strings.Fields(sql)[2], ")"), 10, 64)
			g.mu.Lock()
			defer g.mu.Unlock()
			if claimed < g.version {
				return Result{Code: "IG001"}
			}
			return Result{Rows: [][]string{{strconv.FormatInt(g.version, 10)}}}
		},
	})
	s.Handle("/* id_gen.route_claim=", Handler{
		Run: func(sql string, _ []string) Result {
			comment := strings.TrimSuffix(strings.TrimPrefix(sql, "/* id_gen.route_claim="), " */ BEGIN")
			_, version, _ := strings.Cut(comment, ",")
			claimed, _ := strconv.ParseInt(version, 10, 64)
			g.mu.Lock()
			defer g.mu.Unlock()
			protocol, err := strconv.Atoi(g.routingProtocol)
			readsClaim := err == nil && protocol >= 2 // (an older shard ignores the comment)
			if readsClaim && claimed < g.version {
				return Result{Code: "IG001"} // (no transaction opened)
			}
			return Result{Tag: "BEGIN", Begins: true}
		},
	})
	return g
}

// Change replaces the routes, a version later; the version.
func (g *IDGen) Change(ranges []Range) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ranges = ranges
	g.version++
	return g.version
}

// SetRoutingProtocol makes the probe answer answer (Null: a shard older than id_gen 0.7.16, which
// ignores a claim on BEGIN).
func (g *IDGen) SetRoutingProtocol(answer string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.routingProtocol = answer
}
