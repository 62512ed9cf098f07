// conformance genes: the gene of each owner on stdin, one line each, in order.
//
// Invariants: lines are split on \n only (a text owner may hold \r or \t); empty lines are
// skipped; a line that is no owner is a usage error (status 2) and nothing after it is written.

package main

import (
	"bufio"
	"encoding/hex"
	"io"
	"strconv"
	"strings"

	"github.com/id-gen/id_gen/clients/go/idgen"
)

func genes(stdin io.Reader, stdout io.Writer) error {
	input, err := io.ReadAll(stdin)
	if err != nil {
		return err
	}
	out := bufio.NewWriter(stdout)
	for _, line := range strings.Split(string(input), "\n") {
		if line == "" {
			continue
		}
		gene, err := geneOfLine(line)
		if err != nil {
			out.Flush()
			return err
		}
		out.WriteString(strconv.Itoa(int(gene)))
		out.WriteByte('\n')
	}
	return out.Flush()
}

// geneOfLine is the gene of one owner line: i:<bigint>, t:<text> or u:<uuid>.
func geneOfLine(line string) (uint16, error) {
	kind, value := line[:min(2, len(line))], line[min(2, len(line)):]
	switch kind {
	case "i:":
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return 0, usagef("conformance genes: not a bigint owner: %q", line)
		}
		return idgen.GeneOf(n), nil
	case "t:":
		return idgen.GeneOf(value), nil
	case "u:":
		u, err := parseUUID(value)
		if err != nil {
			return 0, usagef("conformance genes: not a uuid owner: %q", line)
		}
		return idgen.GeneOf(u), nil
	}
	return 0, usagef("conformance genes: a line must start with i:, t: or u:, not %q", line)
}

// parseUUID reads a uuid's text (32 hex digits, dashes anywhere ignored) as its 16 bytes.
func parseUUID(text string) ([16]byte, error) {
	var u [16]byte
	b, err := hex.DecodeString(strings.ReplaceAll(text, "-", ""))
	if err == nil && len(b) != 16 {
		err = hex.ErrLength
	}
	copy(u[:], b)
	return u, err
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}
