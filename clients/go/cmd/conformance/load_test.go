// conformance load end to end against the scripted server of internal/pgscript (coordinator and
// shard at once): the output lines, the log (one whole line per committed transaction, ids of
// the owner's gene), reads by owner, and a stop file; bench's transactions, through the Router
// and on its direct pools (made by the Router's own pool configuration).

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/id-gen/id_gen/clients/go/idgen"
	"github.com/id-gen/id_gen/clients/go/internal/pgscript"
	"github.com/jackc/pgconn/stmtcache"
)

// scriptedCluster serves id_gen's statements, the load's INSERT (ids gene << 47 | n) and its
// count by owner and id range.
func scriptedCluster(t *testing.T) *pgscript.Server {
	server := pgscript.Start(t)
	server.ServeIDGen([]pgscript.Range{{Lower: 0, Upper: 65535, Shard: "a"}})
	var mu sync.Mutex
	rows := map[int64][]int64{} // owner → ids
	next := int64(0)
	server.Handle("INSERT INTO t (id, owner_id) VALUES (id_gen.gene_order_id($1::text, $2::bigint), $2) RETURNING id", pgscript.Handler{
		Params: []uint32{pgscript.Text, pgscript.Int8}, Columns: []pgscript.Column{{Name: "id", Type: pgscript.Int8}},
		Run: func(_ string, params []string) pgscript.Result {
			owner, _ := strconv.ParseInt(params[1], 10, 64)
			mu.Lock()
			defer mu.Unlock()
			next++
			id := int64(idgen.GeneOf(owner))<<47 | next
			rows[owner] = append(rows[owner], id)
			return pgscript.Result{Rows: [][]string{{strconv.FormatInt(id, 10)}}, Tag: "INSERT 0 1"}
		},
	})
	server.Handle("SELECT count(*) FROM t WHERE id BETWEEN $1 AND $2 AND owner_id = $3", pgscript.Handler{
		Params: []uint32{pgscript.Int8, pgscript.Int8, pgscript.Int8}, Columns: []pgscript.Column{{Name: "count", Type: pgscript.Int8}},
		Run: func(_ string, params []string) pgscript.Result {
			var p [3]int64
			for i := range p {
				p[i], _ = strconv.ParseInt(params[i], 10, 64)
			}
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for _, id := range rows[p[2]] {
				if id >= p[0] && id <= p[1] {
					n++
				}
			}
			return pgscript.Result{Rows: [][]string{{strconv.Itoa(n)}}}
		},
	})
	return server
}

func TestLoadOnTheWire(t *testing.T) {
	server := scriptedCluster(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	totalCommitted := 0
	for _, extra := range [][]string{{"--seconds", "0.3", "--read-every", "2"},
		{"--seconds", "60", "--stop-file", dir, "--no-listen", "--refresh-interval-ms", "5"}} { // (the stop file exists: stops at once)
		args := append([]string{"load", "--routes", server.DSN(), "--shard", "a=" + server.DSN(), "--table", "t",
			"--sequence", "q", "--owners", "20", "--log", log}, extra...)
		status, out, stderr := runTool(args, "")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if status != 0 || len(lines) != 2 || stderr != "" {
			t.Fatalf("%v: status %d, out %q, stderr %q", extra, status, out, stderr)
		}
		reads := strings.Fields(lines[0])
		committed := strings.Fields(lines[1])
		if len(reads) != 6 || reads[0] != "reads" || reads[2] != "empty" || reads[3] != "0" || reads[4] != "unknown" ||
			len(committed) != 6 || committed[0] != "committed" || committed[2] != "failed" || committed[3] != "0" ||
			committed[4] != "retries" || committed[5] != "0" {
			t.Errorf("%v: output %q", extra, out)
		}
		n, _ := strconv.Atoi(committed[1])
		totalCommitted += n
		if r, _ := strconv.Atoi(reads[1]); extra[1] == "0.3" && (n == 0 || r == 0) {
			t.Errorf("%v: no transaction or no read: %q", extra, out)
		}
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	logLines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(logLines) != totalCommitted || totalCommitted < 10 {
		t.Fatalf("%d log lines, %d committed", len(logLines), totalCommitted)
	}
	for _, line := range logLines {
		owner, id, ok := strings.Cut(line, ",")
		o, err1 := strconv.ParseInt(owner, 10, 64)
		i, err2 := strconv.ParseInt(id, 10, 64)
		if !ok || err1 != nil || err2 != nil || o < 1 || o > 20 || uint64(i)>>47 != uint64(idgen.GeneOf(o)) {
			t.Errorf("log line %q", line)
		}
	}
}

func TestBenchDirectPoolsAreMadeAsTheRoutersPools(t *testing.T) {
	pools, err := directPools(idgen.Config{MaxConns: 2, Shards: map[string]string{
		"a": "host=127.0.0.1 port=1 user=u dbname=d", "b": "host=127.0.0.1 port=1 user=u dbname=d connect_timeout=3"}})
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	if err != nil || len(pools) != 2 {
		t.Fatalf("%d pools, %v", len(pools), err)
	}
	for name, timeout := range map[string]time.Duration{"a": idgen.DefaultConnectTimeout, "b": 3 * time.Second} {
		config := pools[name].Config()
		if config.BeforeAcquire == nil || config.ConnConfig.ConnectTimeout != timeout || config.MaxConns != 2 || !config.LazyConnect ||
			config.ConnConfig.BuildStatementCache(nil).Mode() != stmtcache.ModeDescribe {
			t.Errorf("shard %s: before acquire %v, connect timeout %v, max %d", name, config.BeforeAcquire != nil,
				config.ConnConfig.ConnectTimeout, config.MaxConns)
		}
	}
}

func TestBenchOnTheWire(t *testing.T) {
	server := scriptedCluster(t)
	for _, direct := range []bool{false, true} {
		args := []string{"bench", "--routes", server.DSN(), "--shard", "a=" + server.DSN(), "--table", "t", "--sequence", "q",
			"--owners", "20", "--seconds", "0.2", "--mode", "tx"}
		if direct {
			args = append(args, "--direct")
		}
		status, out, stderr := runTool(args, "")
		fields := strings.Fields(out)
		if status != 0 || stderr != "" || len(fields) != 4 || fields[0] != "ops" || fields[1] == "0" || fields[2] != "seconds" {
			t.Errorf("direct %v: status %d, out %q, stderr %q", direct, status, out, stderr)
		}
	}
}

func TestBenchSideBySideOnTheWire(t *testing.T) {
	server := scriptedCluster(t)
	args := []string{"bench", "--routes", server.DSN(), "--shard", "a=" + server.DSN(), "--table", "t", "--sequence", "q",
		"--owners", "20", "--seconds", "0.5", "--mode", "tx", "--side-by-side"}
	status, out, stderr := runTool(args, "")
	f := strings.Fields(out)
	if status != 0 || stderr != "" || len(f) != 8 || f[0] != "ops" || f[2] != "seconds" || f[4] != "direct_ops" ||
		f[6] != "direct_seconds" || f[1] == "0" || f[5] == "0" {
		t.Fatalf("status %d, out %q, stderr %q", status, out, stderr)
	}
	if status, _, stderr := runTool(append(args, "--direct"), ""); status != 2 || !strings.Contains(stderr, "exclude each other") {
		t.Errorf("--direct --side-by-side: status %d, stderr %q", status, stderr)
	}
}

func TestBenchWarmUpArgument(t *testing.T) {
	args := []string{"--routes", "host=h", "--shard", "a=host=a", "--table", "t", "--sequence", "q", "--owners", "1",
		"--seconds", "1", "--mode", "tx"}
	if o, err := parseBenchArgs(args, nil); err != nil || o.warmUp != 500*time.Millisecond {
		t.Errorf("default: %v, %v", o.warmUp, err)
	}
	if o, err := parseBenchArgs(append(args, "--warm-up-seconds", "2.5"), nil); err != nil || o.warmUp != 2500*time.Millisecond {
		t.Errorf("2.5: %v, %v", o.warmUp, err)
	}
	for _, bad := range []string{"-1", "NaN", "3601", "x"} {
		if _, err := parseBenchArgs(append(args, "--warm-up-seconds", bad), nil); err == nil {
			t.Errorf("--warm-up-seconds %s taken", bad)
		}
	}
	if _, err := parseBenchArgs(append(args, "--warm-up-seconds"), nil); err == nil {
		t.Errorf("--warm-up-seconds without a value taken")
	}
}

func TestRunSlicesGoRouterDirectDirectRouter(t *testing.T) {
	// A clock that each operation moves on by 62.5 ms: two operations a slice of 100 ms.
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var done []bool
	one := func(direct bool) error {
		done = append(done, direct)
		clock = clock.Add(62500 * time.Microsecond)
		return nil
	}
	now := func() time.Time { return clock }
	measured, err := runSlices(one, sideBySide, time.Second, now)
	const R, D = false, true
	want := []bool{R, R, D, D, D, D, R, R, R, R, D, D, D, D, R, R}
	if err != nil || fmt.Sprint(done) != fmt.Sprint(want) {
		t.Fatalf("sides %v, want %v, %v", done, want, err)
	}
	half := sideMeasure{ops: 8, spent: 500 * time.Millisecond}
	if measured[R] != half || measured[D] != half {
		t.Errorf("measured %+v", measured)
	}
	done = nil
	if measured, _ = runSlices(one, sideBySide, 0, now); fmt.Sprint(done) != fmt.Sprint(sideBySide) ||
		measured[R].ops != 2 || measured[D].ops != 2 {
		t.Errorf("in no time: sides %v, measured %+v", done, measured)
	}
	if _, err := runSlices(func(bool) error { return errors.New("down") }, []bool{true}, time.Second, time.Now); err == nil ||
		err.Error() != "down" {
		t.Errorf("an error ends it: %v", err)
	}
}
