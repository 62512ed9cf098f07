// Genes: the 16-bit hash that places an owner (and every id of it) on a shard.
//
// Invariants (docs/routing-protocol.md §1), equal to the extension's id_gen.shard_gene:
//   - gene(owner) = (xxh64(b, 0) XOR murmur3_x64_128(b, 0).h1) & 0xFFFF over the owner's
//     canonical bytes b: a bigint is its 8 bytes two's-complement little-endian, a string its
//     UTF-8 bytes, a uuid its 16 raw bytes, []byte itself (no type tag).
//   - the gene of an id is id >> 47 (ids are gene << 47 | sequence), for ids 0 .. 2^63-1 only.
//
// xxh64 and the h1 half of murmur3_x64_128 are written out here (seed 0 only) so that the
// package depends on nothing but the driver.

package idgen

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"reflect"
)

// geneMask keeps the 16 bits of a gene; idGeneShift is where the gene starts in an id.
const (
	geneMask    = 0xFFFF
	idGeneShift = 47
	// MaxGene is the largest gene.
	MaxGene = geneMask
)

// OwnerValue is the set of owner types: signed integers (a bigint owner), strings (text), 16-byte
// arrays (a uuid, also named types such as uuid.UUID) and byte slices (bytea).
type OwnerValue interface {
	~int | ~int32 | ~int64 | ~string | ~[16]byte | ~[]byte
}

// GeneOf is the gene (0..65535) of an owner.
func GeneOf[T OwnerValue](owner T) uint16 {
	b, _, err := ownerBytes(owner)
	if err != nil { // (unreachable: the type set admits only owners)
		panic(err)
	}
	return geneOfBytes(b)
}

// GeneOfID is the gene of an id made by id_gen (gene << 47 | sequence): id >> 47. An id below 0
// is no id_gen id and has no gene.
func GeneOfID(id int64) (uint16, error) {
	if id < 0 {
		return 0, fmt.Errorf("idgen: id %d is outside 0..2^63-1", id)
	}
	return uint16(uint64(id) >> idGeneShift), nil
}

// geneOfBytes is the gene of an owner's canonical bytes.
func geneOfBytes(b []byte) uint16 {
	return uint16((xxh64(b) ^ murmur3H1(b)) & geneMask)
}

// ownerSQLType names the SQL type an owner is passed to id_gen functions as.
type ownerSQLType string

const (
	ownerBigint ownerSQLType = "bigint"
	ownerText   ownerSQLType = "text"
	ownerUUID   ownerSQLType = "uuid"
	ownerBytea  ownerSQLType = "bytea"
)

// ownerBytes gives the canonical bytes of an owner of any type (named types included, by kind)
// and its SQL type; an error for any other type.
func ownerBytes(owner any) ([]byte, ownerSQLType, error) {
	switch v := owner.(type) {
	case int64:
		return int64Bytes(v), ownerBigint, nil
	case int:
		return int64Bytes(int64(v)), ownerBigint, nil
	case int32:
		return int64Bytes(int64(v)), ownerBigint, nil
	case string:
		return []byte(v), ownerText, nil
	case [16]byte:
		return v[:], ownerUUID, nil
	case []byte:
		return v, ownerBytea, nil
	}
	rv := reflect.ValueOf(owner)
	switch {
	case !rv.IsValid():
	case rv.Kind() == reflect.Int || rv.Kind() == reflect.Int32 || rv.Kind() == reflect.Int64:
		return int64Bytes(rv.Int()), ownerBigint, nil
	case rv.Kind() == reflect.String:
		return []byte(rv.String()), ownerText, nil
	case rv.Kind() == reflect.Array && rv.Len() == 16 && rv.Type().Elem().Kind() == reflect.Uint8:
		b := make([]byte, 16)
		reflect.Copy(reflect.ValueOf(b), rv)
		return b, ownerUUID, nil
	case rv.Kind() == reflect.Slice && rv.Type().Elem().Kind() == reflect.Uint8:
		return rv.Bytes(), ownerBytea, nil
	}
	return nil, "", fmt.Errorf("idgen: an owner is an int64, a string, a uuid ([16]byte) or []byte, not %T", owner)
}

func int64Bytes(v int64) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, uint64(v))
	return b
}

const (
	xxP1 uint64 = 11400714785074694791
	xxP2 uint64 = 14029467366897019727
	xxP3 uint64 = 1609587929392839161
	xxP4 uint64 = 9650029242287828579
	xxP5 uint64 = 2870177450012600261
)

func xxRound(acc, input uint64) uint64 {
	return bits.RotateLeft64(acc+input*xxP2, 31) * xxP1
}

func xxMerge(acc, val uint64) uint64 {
	return (acc^xxRound(0, val))*xxP1 + xxP4
}

// xxh64 is XXH64 of b with seed 0.
func xxh64(b []byte) uint64 {
	n := len(b)
	var h uint64
	if n >= 32 {
		p1, p2 := xxP1, xxP2 // (variables: the sums wrap around, as constants they would not compile)
		v1, v2, v3, v4 := p1+p2, p2, uint64(0), -p1
		for ; len(b) >= 32; b = b[32:] {
			v1 = xxRound(v1, binary.LittleEndian.Uint64(b[0:]))
			v2 = xxRound(v2, binary.LittleEndian.Uint64(b[8:]))
			v3 = xxRound(v3, binary.LittleEndian.Uint64(b[16:]))
			v4 = xxRound(v4, binary.LittleEndian.Uint64(b[24:]))
		}
		h = bits.RotateLeft64(v1, 1) + bits.RotateLeft64(v2, 7) + bits.RotateLeft64(v3, 12) + bits.RotateLeft64(v4, 18)
		h = xxMerge(xxMerge(xxMerge(xxMerge(h, v1), v2), v3), v4)
	} else {
		h = xxP5
	}
	h += uint64(n)
	for ; len(b) >= 8; b = b[8:] {
		h = bits.RotateLeft64(h^xxRound(0, binary.LittleEndian.Uint64(b)), 27)*xxP1 + xxP4
	}
	if len(b) >= 4 {
		h = bits.RotateLeft64(h^uint64(binary.LittleEndian.Uint32(b))*xxP1, 23)*xxP2 + xxP3
		b = b[4:]
	}
	for _, c := range b {
		h = bits.RotateLeft64(h^uint64(c)*xxP5, 11) * xxP1
	}
	h ^= h >> 33
	h *= xxP2
	h ^= h >> 29
	h *= xxP3
	return h ^ (h >> 32)
}

const (
	mmC1 uint64 = 0x87c37b91114253d5
	mmC2 uint64 = 0x4cf5ad432745937f
)

func fmix64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	return k ^ (k >> 33)
}

// murmur3H1 is the first half (h1) of MurmurHash3_x64_128 of b with seed 0.
func murmur3H1(b []byte) uint64 {
	n := len(b)
	var h1, h2 uint64
	for ; len(b) >= 16; b = b[16:] {
		k1 := bits.RotateLeft64(binary.LittleEndian.Uint64(b)*mmC1, 31) * mmC2
		h1 = (bits.RotateLeft64(h1^k1, 27)+h2)*5 + 0x52dce729
		k2 := bits.RotateLeft64(binary.LittleEndian.Uint64(b[8:])*mmC2, 33) * mmC1
		h2 = (bits.RotateLeft64(h2^k2, 31)+h1)*5 + 0x38495ab5
	}
	if len(b) > 8 {
		var k2 uint64
		for i := len(b) - 1; i >= 8; i-- {
			k2 = k2<<8 | uint64(b[i])
		}
		h2 ^= bits.RotateLeft64(k2*mmC2, 33) * mmC1
	}
	if len(b) > 0 {
		var k1 uint64
		for i := min(len(b), 8) - 1; i >= 0; i-- {
			k1 = k1<<8 | uint64(b[i])
		}
		h1 ^= bits.RotateLeft64(k1*mmC1, 31) * mmC2
	}
	h1 ^= uint64(n)
	h2 ^= uint64(n)
	h1 += h2
	h2 += h1
	h1 = fmix64(h1)
	h2 = fmix64(h2)
	return h1 + h2
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}
