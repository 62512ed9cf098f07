// The conformance tool without a server: genes (the check values, bad lines), the load's
// arguments, and a coordinator that cannot be reached (status 1).

package main

import (
	"bytes"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/id-gen/id_gen/clients/go/idgen"
)

func runTool(args []string, stdin string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	status := run(args, strings.NewReader(stdin), &stdout, &stderr)
	return status, stdout.String(), stderr.String()
}

func TestGenes(t *testing.T) {
	status, out, _ := runTool([]string{"genes"},
		"i:42\nt:alice\ni:0\n\ni:45346343212\nu:12345678-1234-5678-1234-567812345678\nt:a\rb\ni:-1")
	want := "16043\n13795\n55408\n14299\n" + itoa(idgen.GeneOf([16]byte{0x12, 0x34, 0x56, 0x78, 0x12, 0x34, 0x56, 0x78,
		0x12, 0x34, 0x56, 0x78, 0x12, 0x34, 0x56, 0x78})) + "\n" + itoa(idgen.GeneOf("a\rb")) + "\n" + itoa(idgen.GeneOf(int64(-1))) + "\n"
	if status != 0 || out != want {
		t.Errorf("status %d, out %q, want %q", status, out, want)
	}
	for _, bad := range []string{"x:1\n", "i:1.5\n", "i:9223372036854775808\n", "u:123\n", "42\n"} {
		if status, _, stderr := runTool([]string{"genes"}, bad); status != 2 || !strings.Contains(stderr, "usage:") {
			t.Errorf("%q: status %d, stderr %q", bad, status, stderr)
		}
	}
}

func itoa(g uint16) string { return strconv.Itoa(int(g)) }

func TestLoadArguments(t *testing.T) {
	good := []string{"--routes", "host=h", "--shard", "a=host=a port=1", "--shard", "b=host=b", "--table", "public.t",
		"--sequence", "q", "--owners", "10", "--seconds", "1.5", "--log", "l"}
	o, err := parseLoadArgs(append(good, "--read-every", "0", "--refresh-interval-ms", "0", "--no-listen"), nil)
	if err != nil || o.shards["a"] != "host=a port=1" || len(o.shards) != 2 || o.duration != 1500*time.Millisecond ||
		o.readEvery != 0 || o.refreshInterval != idgen.NoRefreshPoll || o.listen || o.owners != 10 {
		t.Errorf("%+v, %v", o, err)
	}
	if o, _ := parseLoadArgs(good, nil); o.readEvery != 4 || o.refreshInterval != time.Second || !o.listen ||
		o.retryLimit != idgen.DefaultRetryLimit || o.backoffMax != idgen.DefaultBackoffMax {
		t.Errorf("defaults %+v", o)
	}
	o, err = parseLoadArgs(append(good, "--retry-limit", "200", "--backoff-max-ms", "1000"), nil)
	if c := o.withRetrySettings(idgen.Config{}); err != nil || *c.RetryLimit != 200 || c.BackoffMax != time.Second ||
		c.BackoffBase != idgen.DefaultBackoffBase {
		t.Errorf("--retry-limit 200 --backoff-max-ms 1000: %+v, %v", o, err)
	}
	failover := "host=127.0.0.1,127.0.0.1 port=5435,5436 user=u dbname=d target_session_attrs=read-write connect_timeout=2"
	if o, err := parseLoadArgs(append(good, "--shard", "c="+failover), nil); err != nil || o.shards["c"] != failover {
		t.Errorf("a multi-host read-write shard DSN: %+v, %v", o, err)
	}
	o, err = parseLoadArgs(append(good, "--retry-limit", "0", "--backoff-max-ms", "0"), nil)
	if c := o.withRetrySettings(idgen.Config{}); err != nil || *c.RetryLimit != 0 || c.BackoffMax != time.Nanosecond ||
		c.BackoffBase != time.Nanosecond {
		t.Errorf("--retry-limit 0 --backoff-max-ms 0: %+v, %v", c, err)
	}
	for _, bad := range [][]string{
		{"--routes", "h"},
		append(append([]string(nil), good...), "--owners", "0"),
		append(append([]string(nil), good...), "--table", "t; DROP TABLE x"),
		append(append([]string(nil), good...), "--seconds", "soon"),
		append(append([]string(nil), good...), "--shard", "nodsn"),
		append(append([]string(nil), good...), "--read-every", "-1"),
		append(append([]string(nil), good...), "extra"),
		append(append([]string(nil), good...), "--frobnicate"),
		append(append([]string(nil), good...), "--retry-limit", "-1"),
		append(append([]string(nil), good...), "--retry-limit", "1.5"),
		append(append([]string(nil), good...), "--retry-limit", "+3"),
		append(append([]string(nil), good...), "--backoff-max-ms", "-5"),
		append(append([]string(nil), good...), "--backoff-max-ms", "x"),
	} {
		if status, _, stderr := runTool(append([]string{"load"}, bad...), ""); status != 2 || !strings.Contains(stderr, "usage:") {
			t.Errorf("%q: status %d, stderr %q", bad, status, stderr)
		}
	}
	if status, _, _ := runTool([]string{"frob"}, ""); status != 2 {
		t.Errorf("no mode: status %d", status)
	}
}

func TestLoadWithoutCoordinator(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // (nothing listens there now: refused)
	dsn := "host=127.0.0.1 port=" + strconv.Itoa(port) + " user=u dbname=d sslmode=disable connect_timeout=5"
	status, out, stderr := runTool([]string{"load", "--routes", dsn, "--shard", "a=" + dsn, "--table", "t", "--sequence", "q",
		"--owners", "5", "--seconds", "1", "--log", filepath.Join(t.TempDir(), "log")}, "")
	if status != 1 || out != "" || !strings.Contains(stderr, "routes could not be read") {
		t.Errorf("status %d, out %q, stderr %q", status, out, stderr)
	}
}
