// The protocol scenarios shared by every client (clients/protocol-scenarios.json), run against
// the fake of fake_test.go: the same expectations as the Node.js, Python and Rust clients' fake
// tests, compared key by key with the file's "expect", and no connection leaked.

package idgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

type scenario struct {
	Name               string
	Routes             []fakeRange
	RoutesChangeUnseen []fakeRange `json:"routes_change_unseen"`
	CoordinatorDown    bool        `json:"coordinator_down"`
	Fenced             int
	BodyErrors         []string `json:"body_errors"`
	ConnectFails       int      `json:"connect_fails"`
	ClaimLost          int      `json:"claim_lost"`
	CommitLost         bool     `json:"commit_lost"`
	RetryLimit         *int     `json:"retry_limit"`
	Call               string
	Key                struct {
		Gene    *int
		OwnerOn *string `json:"owner_on"`
	}
	Expect map[string]any
}

// UnmarshalJSON reads a route as the file writes it: [upper_gene, shard].
func (r *fakeRange) UnmarshalJSON(data []byte) error {
	var pair []any
	if err := json.Unmarshal(data, &pair); err != nil {
		return err
	}
	upper, ok1 := pair[0].(float64)
	shard, ok2 := pair[1].(string)
	if len(pair) != 2 || !ok1 || !ok2 {
		return fmt.Errorf("a route is [upper_gene, shard], not %s", data)
	}
	r.upper, r.shard = uint16(upper), shard
	return nil
}

func loadScenarios(t *testing.T) []scenario {
	data, err := os.ReadFile(filepath.Join("..", "..", "protocol-scenarios.json"))
	if err != nil {
		t.Fatal(err)
	}
	decoder := json.NewDecoder(strings.NewReader(string(data)))
	decoder.DisallowUnknownFields() // (a field this test does not set up is an error, not ignored)
	var file struct {
		About     []string
		Scenarios []scenario
	}
	if err := decoder.Decode(&file); err != nil {
		t.Fatal(err)
	}
	if len(file.Scenarios) < 10 {
		t.Fatalf("the scenario file lost its scenarios (%d)", len(file.Scenarios))
	}
	return file.Scenarios
}

// scenarioSettings are the scenarios' router: shards a and b, a tiny backoff, no listener,
// no poll.
func scenarioSettings(t *testing.T, retryLimit *int) settings {
	s, err := Config{
		Routes: "coordinator", Shards: map[string]string{"a": "a", "b": "b"}, RetryLimit: retryLimit,
		BackoffBase: 50 * time.Microsecond, BackoffMax: 200 * time.Microsecond, NoListen: true,
		RefreshInterval: NoRefreshPoll,
	}.settings()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestScenarios(t *testing.T) {
	for _, sc := range loadScenarios(t) {
		sc := sc
		t.Run(sc.Name, func(t *testing.T) { runScenario(t, sc) })
	}
}

func runScenario(t *testing.T, sc scenario) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cluster := newFakeCluster(sc.Routes)
	router, err := newRouter(ctx, scenarioSettings(t, sc.RetryLimit), cluster)
	if err != nil {
		t.Fatal(err)
	}
	defer router.Close()

	var key Key
	var owner int64
	switch {
	case sc.Key.Gene != nil:
		key = Gene(*sc.Key.Gene)
	case sc.Key.OwnerOn != nil:
		for cluster.ownerOf(GeneOf(owner)) != *sc.Key.OwnerOn {
			owner++
		}
		key = Owner(owner)
	default:
		t.Fatal("a key is {gene} or {owner_on}")
	}
	if sc.RoutesChangeUnseen != nil {
		cluster.change(sc.RoutesChangeUnseen, false)
	}
	cluster.mu.Lock()
	cluster.down = sc.CoordinatorDown
	cluster.fences = sc.Fenced
	cluster.connectFails = sc.ConnectFails
	cluster.claimsLost = sc.ClaimLost
	cluster.commitLost = sc.CommitLost
	cluster.mu.Unlock()

	bodyRuns := 0
	shard := ""
	body := func(ctx context.Context, tx pgx.Tx) error {
		bodyRuns++
		if bodyRuns <= len(sc.BodyErrors) {
			code := sc.BodyErrors[bodyRuns-1]
			if strings.HasPrefix(code, "08") { // (class 08: the connection ended under the body)
				return tx.(*fakeTx).conn.lose(&pgconn.PgError{Severity: "FATAL", Code: code, Message: "fake: connection lost"})
			}
			return sqlError(code)
		}
		shard = tx.(*fakeTx).conn.shard
		return nil
	}
	switch sc.Call {
	case "transaction":
		err = router.Transaction(ctx, key, body)
	case "run":
		err = router.Run(ctx, key, body)
	case "execute":
		var rows [][]any
		rows, err = router.Execute(ctx, key, fakeReadSQL, owner)
		if err == nil {
			if !reflect.DeepEqual(rows, [][]any{{int64(7)}}) {
				t.Errorf("execute: rows %v, want [[7]]", rows)
			}
			shard = cluster.lastReadShard
		}
	default:
		t.Fatalf("no call %q", sc.Call)
	}

	got := map[string]any{}
	var unknown *CommitOutcomeUnknownError
	switch {
	case err == nil:
		got["outcome"], got["shard"] = "committed", shard
	case errors.Is(err, ErrRetriesExhausted):
		got["outcome"], got["last_code"] = "exhausted", SQLState(err)
	case errors.Is(err, ErrNoRoute):
		got["outcome"] = "no_route"
	case errors.As(err, &unknown):
		got["outcome"] = "commit_unknown"
		if unknown.Err == nil || !errors.Is(err, ErrCommitOutcomeUnknown) {
			t.Errorf("commit outcome unknown holds the driver's error: %v", err)
		}
	case SQLState(err) != "":
		got["outcome"], got["last_code"] = "error", SQLState(err)
	default:
		t.Fatalf("an error the scenarios do not know: %v", err)
	}
	stats := router.Stats()
	got["body_runs"] = bodyRuns
	got["claims"] = cluster.claims()
	got["retries_moved"] = stats.RetriesMoved
	got["retries_fenced"] = stats.RetriesFenced
	got["retries_lost"] = stats.RetriesLost
	got["refreshes"] = stats.Refreshes
	got["version"] = router.Version()

	for name, want := range sc.Expect {
		value, ok := got[name]
		if !ok {
			t.Errorf("expect names %q, which this test does not measure", name)
			continue
		}
		if fmt.Sprint(value) != fmt.Sprint(want) {
			t.Errorf("%s: got %v, want %v (error: %v)", name, value, want, err)
		}
	}
	if leaks := cluster.leaks(); leaks != "" {
		t.Error(leaks)
	}
}
