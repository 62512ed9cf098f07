// Genes without a server: the check values of docs/routing-protocol.md §1, encodings that look
// right but are wrong, and the 10,000 owners of each type in clients/gene-vectors.json (computed
// by the extension).

package idgen

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestGeneCheckValues(t *testing.T) {
	for owner, want := range map[int64]uint16{42: 16043, 0: 55408, 1: 24031, 45346343212: 14299} {
		if got := GeneOf(owner); got != want {
			t.Errorf("GeneOf(int64 %d) = %d, want %d", owner, got, want)
		}
	}
	if got := GeneOf("alice"); got != 13795 {
		t.Errorf(`GeneOf("alice") = %d, want 13795`, got)
	}
	if GeneOf(42) != 16043 || GeneOf(int32(42)) != 16043 {
		t.Error("an int or int32 owner is a bigint owner")
	}
}

func TestGeneEncodings(t *testing.T) {
	big := make([]byte, 8)
	binary.BigEndian.PutUint64(big, 42)
	four := make([]byte, 4)
	binary.LittleEndian.PutUint32(four, 42)
	for _, c := range []struct {
		what string
		got  uint16
		want uint16
	}{
		{"42 big-endian", GeneOf(big), 0xa845},
		{"42 as text", GeneOf("42"), 0x0dd5},
		{"42 in 4 bytes", GeneOf(four), 0x3f3e},
		{"é is its UTF-8", GeneOf("é"), GeneOf([]byte("é"))},
		{"-1 is 8 bytes 0xff", GeneOf(int64(-1)), GeneOf([]byte{255, 255, 255, 255, 255, 255, 255, 255})},
	} {
		if c.got != c.want {
			t.Errorf("%s: gene %#x, want %#x", c.what, c.got, c.want)
		}
	}
	type namedUUID [16]byte
	u := namedUUID{1, 2, 3}
	if GeneOf(u) != GeneOf(u[:]) || GeneOf([16]byte(u)) != GeneOf(u[:]) {
		t.Error("a uuid is hashed as its 16 raw bytes, named type or not")
	}
	type name string
	if g, err := (&Router{}).GeneOf(name("alice")); err != nil || g != 13795 {
		t.Errorf("a named string owner: %d, %v", g, err)
	}
	if _, err := (&Router{}).GeneOf(3.5); err == nil {
		t.Error("a float owner has no gene")
	}
}

func TestGeneOfID(t *testing.T) {
	id := int64(1234)<<47 | 5
	if g, err := GeneOfID(id); g != 1234 || err != nil {
		t.Errorf("GeneOfID = %d, %v", g, err)
	}
	if g, _ := GeneOfID(1<<63 - 1); g != 65535 {
		t.Errorf("the largest id has gene %d", g)
	}
	if _, err := GeneOfID(-1); err == nil {
		t.Error("a negative id has no gene")
	}
	if _, err := ID(-1).Gene(); err == nil {
		t.Error("ID(-1) is no key")
	}
	if _, err := Gene(65536).Gene(); err == nil {
		t.Error("Gene(65536) is no key")
	}
	if _, err := (Key{}).Gene(); err == nil {
		t.Error("the zero Key is no key")
	}
}

func TestGeneVectors(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "gene-vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var vectors struct {
		Bigint, Text, UUID [][2]json.RawMessage
	}
	if err := json.Unmarshal(data, &vectors); err != nil {
		t.Fatal(err)
	}
	if n := len(vectors.Bigint) + len(vectors.Text) + len(vectors.UUID); n != 30000 {
		t.Fatalf("%d vectors, want 30000", n)
	}
	wrong, above53 := 0, false
	check := func(kind, owner string, got uint16, gene json.RawMessage) {
		want, err := strconv.Atoi(string(gene))
		if err != nil {
			t.Fatalf("%s %q: gene %s", kind, owner, gene)
		}
		if int(got) != want {
			if wrong++; wrong <= 5 {
				t.Errorf("%s %q: gene %d, the extension's %d", kind, owner, got, want)
			}
		}
	}
	for _, v := range vectors.Bigint {
		owner := unquote(t, v[0])
		n, err := strconv.ParseInt(owner, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		above53 = above53 || n > 1<<53
		check("bigint", owner, GeneOf(n), v[1])
	}
	for _, v := range vectors.Text {
		owner := unquote(t, v[0])
		check("text", owner, GeneOf(owner), v[1])
	}
	for _, v := range vectors.UUID {
		owner := unquote(t, v[0])
		b, err := hex.DecodeString(strings.ReplaceAll(owner, "-", ""))
		if err != nil || len(b) != 16 {
			t.Fatalf("uuid %q: %v", owner, err)
		}
		var u [16]byte
		copy(u[:], b)
		check("uuid", owner, GeneOf(u), v[1])
	}
	if wrong > 0 {
		t.Errorf("%d genes differ from the extension's", wrong)
	}
	if !above53 {
		t.Error("no bigint owner above 2^53 among the vectors")
	}
}

func unquote(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return s
}
