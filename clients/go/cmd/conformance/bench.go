// conformance bench (docs/routing-protocol.md §6): one client, one operation at a time,
// through the Router, or (--direct) the same statements on pgxpool pools of the tool's own,
// configured by the Router's own function (idgen.ShardPoolConfig: statement descriptions
// cached, no named prepared statement, the connect timeout, the check of idle connections
// before use), or (--side-by-side) both in alternating slices of 100 ms. --warm-up-seconds
// (0.5) of warm-up, then --seconds; prints "ops N seconds X" (side by side: "ops N seconds X
// direct_ops M direct_seconds Y").
//
// Invariants: nothing is measured but the loop of operations; every call is bounded
// (callTimeout).

package main

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"strconv"
	"time"

	"github.com/id-gen/id_gen/clients/go/idgen"
	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
)

type benchOptions struct {
	loadOptions
	mode       string
	direct     bool
	sideBySide bool
	warmUp     time.Duration
}

// parseBenchArgs reads bench's options: load's (but --log) and --mode tx|lookup, --direct or
// --side-by-side.
func parseBenchArgs(args []string, stderr io.Writer) (benchOptions, error) {
	o := benchOptions{warmUp: 500 * time.Millisecond}
	rest := make([]string, 0, len(args)+2)
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--direct":
			o.direct = true
		case "--side-by-side":
			o.sideBySide = true
		case "--warm-up-seconds":
			var s float64
			var err error
			if i+1 < len(args) {
				s, err = strconv.ParseFloat(args[i+1], 64)
			}
			if i+1 >= len(args) || err != nil || !(s >= 0 && s <= 3600) {
				return o, usagef("--warm-up-seconds takes 0 to 3600 seconds")
			}
			o.warmUp = time.Duration(s * float64(time.Second))
			i++
		case "--mode":
			if i+1 >= len(args) || (args[i+1] != "tx" && args[i+1] != "lookup") {
				return o, usagef("--mode takes tx or lookup")
			}
			o.mode = args[i+1]
			i++
		default:
			rest = append(rest, args[i])
		}
	}
	if o.mode == "" {
		return o, usagef("--mode tx|lookup is required")
	}
	if o.direct && o.sideBySide {
		return o, usagef("--direct and --side-by-side exclude each other")
	}
	var err error
	o.loadOptions, err = parseLoadArgs(append(rest, "--log", "/dev/null"), stderr)
	return o, err
}

func bench(o benchOptions, stdout io.Writer) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	routerConfig := o.withRetrySettings(idgen.Config{
		Routes: o.routes, Shards: o.shards, NoListen: true, RefreshInterval: idgen.NoRefreshPoll, MaxConns: 2,
	})
	router, err := idgen.NewRouter(ctx, routerConfig)
	if err != nil {
		return 1, fmt.Errorf("the routes could not be read: %w", err)
	}
	defer closeWithin(router, closeTimeout)
	pools, err := directPools(routerConfig)
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	if err != nil {
		return 1, err
	}
	insert := "INSERT INTO " + o.table + " (id, owner_id) VALUES (id_gen.gene_order_id($1::text, $2::bigint), $2) RETURNING id"
	lookup := "SELECT owner_id FROM " + o.table + " WHERE id = $1"
	var ids []int64
	if o.mode == "lookup" {
		conn, err := pgx.Connect(ctx, o.routes)
		if err != nil {
			return 1, err
		}
		rows, err := conn.Query(ctx, "SELECT id FROM "+o.table+" LIMIT 1000")
		for err == nil && rows.Next() {
			var id int64
			if err = rows.Scan(&id); err == nil {
				ids = append(ids, id)
			}
		}
		if err == nil {
			err = rows.Err()
		}
		_ = conn.Close(ctx)
		if err != nil {
			return 1, err
		}
		if len(ids) == 0 {
			return 1, fmt.Errorf("%s has no rows to look up", o.table)
		}
	}
	rng := rand.New(rand.NewSource(7))
	n := 0
	one := func(direct bool) error {
		n++
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		if o.mode == "tx" {
			owner := 1 + rng.Int63n(o.owners)
			var id int64
			if !direct {
				return router.Transaction(ctx, idgen.Owner(owner), func(ctx context.Context, tx pgx.Tx) error {
					return tx.QueryRow(ctx, insert, o.sequence, owner).Scan(&id)
				})
			}
			shard, err := router.ShardForOwner(owner)
			if err != nil {
				return err
			}
			return pools[shard].BeginFunc(ctx, func(tx pgx.Tx) error {
				return tx.QueryRow(ctx, insert, o.sequence, owner).Scan(&id)
			})
		}
		id := ids[n%len(ids)]
		if !direct {
			_, err := router.Execute(ctx, idgen.ID(id), lookup, id)
			return err
		}
		shard, err := router.ShardForID(id)
		if err != nil {
			return err
		}
		var owner int64
		return pools[shard].QueryRow(ctx, lookup, id).Scan(&owner)
	}
	sides := []bool{o.direct}
	if o.sideBySide {
		sides = sideBySide
	}
	if _, err := runSlices(one, sides, o.warmUp, time.Now); err != nil {
		return 1, err
	}
	measured, err := runSlices(one, sides, o.duration, time.Now)
	if err != nil {
		return 1, err
	}
	if o.sideBySide {
		fmt.Fprintf(stdout, "ops %d seconds %.3f direct_ops %d direct_seconds %.3f\n", measured[false].ops,
			measured[false].spent.Seconds(), measured[true].ops, measured[true].spent.Seconds())
	} else {
		fmt.Fprintf(stdout, "ops %d seconds %.3f\n", measured[o.direct].ops, measured[o.direct].spent.Seconds())
	}
	return 0, nil
}

// sliceLength is how long one side runs before the other takes over, side by side.
const sliceLength = 100 * time.Millisecond

// sideBySide are the sides of the slices in turn, side by side (false: the Router, true: the
// direct pools): Router, direct, direct, Router, so that a drift of the machine weighs on both
// alike.
var sideBySide = []bool{false, true, true, false}

// sideMeasure is what one side did: operations, and the time they took.
type sideMeasure struct {
	ops   int
	spent time.Duration
}

// runSlices runs one(side) for d in slices of sliceLength, the slices' sides in the cyclic
// order of sides, and at least one slice of each of them, by the clock now; it returns what
// each side did, its time from the starts of its slices to the ends of their last operations.
// The first error ends it.
func runSlices(one func(direct bool) error, sides []bool, d time.Duration, now func() time.Time) (map[bool]sideMeasure, error) {
	measured := map[bool]sideMeasure{}
	end := now().Add(d)
	for i := 0; ; i++ {
		start := now()
		if !start.Before(end) && i >= len(sides) {
			return measured, nil
		}
		side := sides[i%len(sides)]
		sliceEnd := start.Add(sliceLength)
		if sliceEnd.After(end) {
			sliceEnd = end
		}
		ops := 0
		var t time.Time
		for {
			if err := one(side); err != nil {
				return measured, err
			}
			ops++
			if t = now(); !t.Before(sliceEnd) {
				break
			}
		}
		m := measured[side]
		measured[side] = sideMeasure{ops: m.ops + ops, spent: m.spent + t.Sub(start)}
	}
}

// directPools are the --direct pools, one per shard of c, configured by the Router's own
// function (idgen.ShardPoolConfig), so that the comparison is fair; lazy: nothing connects here.
// On an error, the pools made so far are returned too (to be closed).
func directPools(c idgen.Config) (map[string]*pgxpool.Pool, error) {
	pools := map[string]*pgxpool.Pool{}
	for name, dsn := range c.Shards {
		config, err := idgen.ShardPoolConfig(c, name, dsn)
		if err != nil {
			return pools, fmt.Errorf("--shard %s: %w", name, err)
		}
		if pools[name], err = pgxpool.ConnectConfig(context.Background(), config); err != nil {
			return pools, err
		}
	}
	return pools, nil
}
