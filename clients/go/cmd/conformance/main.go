// Command conformance is the Go client's conformance tool (docs/routing-protocol.md §6): the
// same command line as every other client's, run by tests/cluster/test_conformance.py through
// clients/go/conformance.
//
//	conformance genes        owners on stdin (i:<bigint>, t:<text>, u:<uuid>), genes on stdout
//	conformance load ...     4 writers through one Router (see usage)
//	conformance bench ...    one client's transactions or lookups: Router, --direct or --side-by-side
//
// Exit status: 0 when the mode ran (a load's failures are counted, not fatal), 2 for bad
// arguments or input, 1 when the routes could not be read at the start (or another error).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
)

const usage = `usage: conformance genes
       conformance load --routes DSN --shard NAME=DSN [--shard NAME=DSN ...] --table T --sequence Q
                        --owners N --seconds S --log FILE [--stop-file F] [--read-every K]
                        [--refresh-interval-ms MS] [--no-listen] [--retry-limit N]
                        [--backoff-max-ms MS]
       conformance bench (the flags of load but --log) --mode tx|lookup [--direct | --side-by-side]
                        [--warm-up-seconds S]`

// usageError ends the tool with status 2 and the usage.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run is the tool on args, with its exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var err error
	status := 0
	switch {
	case len(args) == 1 && args[0] == "genes":
		err = genes(stdin, stdout)
	case len(args) >= 1 && args[0] == "load":
		var options loadOptions
		if options, err = parseLoadArgs(args[1:], stderr); err == nil {
			status, err = load(options, stdout, stderr)
		}
	case len(args) >= 1 && args[0] == "bench":
		var options benchOptions
		if options, err = parseBenchArgs(args[1:], stderr); err == nil {
			status, err = bench(options, stdout)
		}
	default:
		mode := ""
		if len(args) > 0 {
			mode = args[0]
		}
		err = usagef("conformance: no mode %q", mode)
	}
	var bad usageError
	switch {
	case errors.As(err, &bad):
		fmt.Fprintf(stderr, "%s\n%s\n", bad.msg, usage)
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "conformance: %v\n", err)
		return 1
	}
	return status
}
