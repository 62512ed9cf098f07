// conformance load: 4 writers through one Router until --seconds pass or the stop file exists
// (docs/routing-protocol.md §6).
//
// Invariants: a log line "owner,id" is written whole (one write to a file opened for append,
// under a lock) only after its transaction committed; every failure is counted, none ends the
// load; the last two stdout lines are "reads R empty E unknown U" and "committed N failed M
// retries X"; every wait is bounded (callTimeout per call, closeTimeout for Close).

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/id-gen/id_gen/clients/go/idgen"
	"github.com/jackc/pgx/v4"
)

const (
	writers      = 4
	errorsShown  = 5
	callTimeout  = 60 * time.Second
	startTimeout = 30 * time.Second
	closeTimeout = 10 * time.Second
)

var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

type loadOptions struct {
	routes          string
	shards          map[string]string
	table, sequence string
	owners          int64
	duration        time.Duration
	log, stopFile   string
	readEvery       int
	refreshInterval time.Duration
	listen          bool
	retryLimit      int           // the Router's RetryLimit (--retry-limit, default 20)
	backoffMax      time.Duration // the Router's BackoffMax (--backoff-max-ms, default 200 ms)
}

// withRetrySettings is c with the Router's RetryLimit and BackoffMax of --retry-limit and
// --backoff-max-ms. BackoffBase is lowered to BackoffMax when that is below it; a largest
// delay of 0 is 1 ns for both (a zero in idgen.Config means its default).
func (o loadOptions) withRetrySettings(c idgen.Config) idgen.Config {
	c.RetryLimit = idgen.Retries(o.retryLimit)
	c.BackoffMax = o.backoffMax
	if c.BackoffMax <= 0 {
		c.BackoffMax = time.Nanosecond
	}
	c.BackoffBase = idgen.DefaultBackoffBase
	if c.BackoffBase > c.BackoffMax {
		c.BackoffBase = c.BackoffMax
	}
	return c
}

// nonNegativeInt is a decimal integer 0 or more (digits only, no sign), or false.
func nonNegativeInt(text string) (int, bool) {
	if text == "" || strings.Trim(text, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(text)
	return n, err == nil
}

// shardFlags collects the repeated --shard NAME=DSN.
type shardFlags map[string]string

func (s shardFlags) String() string { return fmt.Sprint(map[string]string(s)) }

func (s shardFlags) Set(value string) error {
	name, dsn, ok := strings.Cut(value, "=")
	if !ok || name == "" {
		return fmt.Errorf("--shard takes NAME=DSN, not %q", value)
	}
	s[name] = dsn
	return nil
}

// parseLoadArgs reads the load's options; a usageError when they are wrong.
func parseLoadArgs(args []string, stderr io.Writer) (loadOptions, error) {
	o := loadOptions{shards: map[string]string{}}
	flags := flag.NewFlagSet("conformance load", flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	flags.StringVar(&o.routes, "routes", "", "")
	flags.Var(shardFlags(o.shards), "shard", "")
	flags.StringVar(&o.table, "table", "", "")
	flags.StringVar(&o.sequence, "sequence", "", "")
	owners := flags.String("owners", "", "")
	seconds := flags.String("seconds", "", "")
	flags.StringVar(&o.log, "log", "", "")
	flags.StringVar(&o.stopFile, "stop-file", "", "")
	readEvery := flags.String("read-every", "4", "")
	refreshMs := flags.String("refresh-interval-ms", "1000", "")
	noListen := flags.Bool("no-listen", false, "")
	retryLimit := flags.String("retry-limit", strconv.Itoa(idgen.DefaultRetryLimit), "")
	backoffMaxMs := flags.String("backoff-max-ms", strconv.Itoa(int(idgen.DefaultBackoffMax/time.Millisecond)), "")
	if err := flags.Parse(args); err != nil {
		return o, usagef("conformance load: %v", err)
	}
	if flags.NArg() > 0 {
		return o, usagef("conformance load: unexpected argument %q", flags.Arg(0))
	}
	for name, value := range map[string]string{"routes": o.routes, "table": o.table, "sequence": o.sequence,
		"owners": *owners, "seconds": *seconds, "log": o.log} {
		if value == "" {
			return o, usagef("--%s is required", name)
		}
	}
	if len(o.shards) == 0 {
		return o, usagef("--shard is required")
	}
	for _, dsn := range append([]string{o.routes}, shardDSNs(o.shards)...) {
		if _, err := pgx.ParseConfig(dsn); err != nil {
			return o, usagef("conformance load: %v", err)
		}
	}
	if !tableName.MatchString(o.table) {
		return o, usagef("--table takes a table name, not %q", o.table)
	}
	var err error
	if o.owners, err = strconv.ParseInt(*owners, 10, 64); err != nil || o.owners < 1 {
		return o, usagef("--owners takes an integer of at least 1, not %q", *owners)
	}
	s, err := strconv.ParseFloat(*seconds, 64)
	if err != nil || s < 0 || s > 1e9 {
		return o, usagef("--seconds takes a number of seconds, not %q", *seconds)
	}
	o.duration = time.Duration(s * float64(time.Second))
	if o.readEvery, err = strconv.Atoi(*readEvery); err != nil || o.readEvery < 0 {
		return o, usagef("--read-every takes an integer of at least 0, not %q", *readEvery)
	}
	ms, err := strconv.Atoi(*refreshMs)
	if err != nil || ms < 0 {
		return o, usagef("--refresh-interval-ms takes an integer of at least 0, not %q", *refreshMs)
	}
	o.refreshInterval = time.Duration(ms) * time.Millisecond
	if ms == 0 {
		o.refreshInterval = idgen.NoRefreshPoll
	}
	o.listen = !*noListen
	var ok bool
	if o.retryLimit, ok = nonNegativeInt(*retryLimit); !ok {
		return o, usagef("--retry-limit takes an integer of at least 0, not %q", *retryLimit)
	}
	backoffMs, ok := nonNegativeInt(*backoffMaxMs)
	if !ok || backoffMs > 1e9 {
		return o, usagef("--backoff-max-ms takes an integer of at least 0 (ms), not %q", *backoffMaxMs)
	}
	o.backoffMax = time.Duration(backoffMs) * time.Millisecond
	return o, nil
}

func shardDSNs(shards map[string]string) []string {
	var dsns []string
	for _, dsn := range shards {
		dsns = append(dsns, dsn)
	}
	return dsns
}

// counts of a load, under mu.
type counts struct {
	mu                                       sync.Mutex
	reads, empty, unknown, committed, failed int
}

type loadRun struct {
	router    *idgen.Router
	o         loadOptions
	deadline  time.Time
	logMu     sync.Mutex
	logFile   *os.File
	insertSQL string
	readSQL   string
	stderr    io.Writer
	counts    counts
}

// load runs the load; status 1 (and no error) when the routes could not be read at the start.
func load(o loadOptions, stdout, stderr io.Writer) (int, error) {
	logFile, err := os.OpenFile(o.log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return 0, usagef("--log: %v", err)
	}
	defer logFile.Close()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	router, err := idgen.NewRouter(ctx, o.withRetrySettings(idgen.Config{
		Routes: o.routes, Shards: o.shards, RefreshInterval: o.refreshInterval, NoListen: !o.listen, MaxConns: writers,
	}))
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "conformance load: the routes could not be read: %v\n", err)
		return 1, nil
	}
	l := &loadRun{
		router: router, o: o, deadline: time.Now().Add(o.duration), logFile: logFile, stderr: stderr,
		insertSQL: "INSERT INTO " + o.table + " (id, owner_id) VALUES (id_gen.gene_order_id($1::text, $2::bigint), $2) RETURNING id",
		readSQL:   "SELECT count(*) FROM " + o.table + " WHERE id BETWEEN $1 AND $2 AND owner_id = $3",
	}
	var wg sync.WaitGroup
	for seed := 0; seed < writers; seed++ {
		wg.Add(1)
		go func(seed int) {
			defer wg.Done()
			l.writer(int64(seed))
		}(seed)
	}
	wg.Wait()
	closeWithin(router, closeTimeout)
	stats := router.Stats()
	c := &l.counts
	fmt.Fprintf(stdout, "reads %d empty %d unknown %d\n", c.reads, c.empty, c.unknown)
	fmt.Fprintf(stdout, "committed %d failed %d retries %d\n", c.committed, c.failed,
		stats.RetriesMoved+stats.RetriesFenced+stats.RetriesLost)
	return 0, nil
}

// closeWithin closes the router, waiting at most d for it.
func closeWithin(router *idgen.Router, d time.Duration) {
	closed := make(chan struct{})
	go func() {
		router.Close()
		close(closed)
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-closed:
	case <-timer.C:
	}
}

func (l *loadRun) done() bool {
	if !time.Now().Before(l.deadline) {
		return true
	}
	if l.o.stopFile != "" {
		if _, err := os.Stat(l.o.stopFile); err == nil {
			return true
		}
	}
	return false
}

// writer loops: a transaction on a random owner, and every readEvery-th iteration a read of
// an owner it committed a row for.
func (l *loadRun) writer(seed int64) {
	random := rand.New(rand.NewSource(seed))
	var written []int64 // owners this writer committed a row for, each once
	seen := map[int64]bool{}
	for iteration := 1; !l.done(); iteration++ {
		owner := 1 + random.Int63n(l.o.owners)
		if l.insert(owner) && !seen[owner] {
			seen[owner] = true
			written = append(written, owner)
		}
		if l.o.readEvery > 0 && iteration%l.o.readEvery == 0 && len(written) > 0 {
			l.read(written[random.Intn(len(written))])
		}
	}
}

// insert commits one row of owner and logs it; whether it committed.
func (l *loadRun) insert(owner int64) bool {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var id int64
	err := l.router.Transaction(ctx, idgen.Owner(owner), func(ctx context.Context, tx pgx.Tx) error {
		return tx.QueryRow(ctx, l.insertSQL, l.o.sequence, owner).Scan(&id)
	})
	if err != nil {
		l.failed("transaction", err)
		return false
	}
	l.logMu.Lock()
	_, werr := l.logFile.WriteString(fmt.Sprintf("%d,%d\n", owner, id))
	l.logMu.Unlock()
	if werr != nil { // (committed but not logged: said, not counted as a failed transaction)
		fmt.Fprintf(l.stderr, "conformance load: writing the log: %v\n", werr)
	}
	l.counts.mu.Lock()
	l.counts.committed++
	l.counts.mu.Unlock()
	return true
}

// read counts owner's rows through its id range (gene << 47 .. | 2^47 - 1); 0 is an empty read.
func (l *loadRun) read(owner int64) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	lo := int64(idgen.GeneOf(owner)) << 47
	hi := lo | (1<<47 - 1)
	rows, err := l.router.Execute(ctx, idgen.Owner(owner), l.readSQL, lo, hi, owner)
	if err != nil {
		l.failed("read", err)
		return
	}
	l.counts.mu.Lock()
	defer l.counts.mu.Unlock()
	l.counts.reads++
	if len(rows) == 0 || len(rows[0]) == 0 || rows[0][0] == int64(0) {
		l.counts.empty++
	}
}

func (l *loadRun) failed(what string, err error) {
	l.counts.mu.Lock()
	defer l.counts.mu.Unlock()
	l.counts.failed++
	if errors.Is(err, idgen.ErrCommitOutcomeUnknown) {
		l.counts.unknown++
	}
	if l.counts.failed <= errorsShown {
		code := ""
		if state := idgen.SQLState(err); state != "" {
			code = " [" + state + "]"
		}
		fmt.Fprintf(l.stderr, "failed %s: %v%s\n", what, err, code)
	}
}
