// Keys: what a routed call is routed by (docs/routing-protocol.md §5, "keys"): an owner, an id
// or a gene. Every key resolves to one gene.
//
// Invariants: a Key is immutable; a Key that cannot be routed (a negative id, a gene outside
// 0..65535, the zero Key) carries its error, which every call that takes it returns before
// anything is sent.

package idgen

import (
	"errors"
	"fmt"
)

// Key is a routing key; make one with Owner, ID or Gene.
type Key struct {
	gene  uint16
	owner any          // the owner, for a Key made by Owner
	typ   ownerSQLType // the owner's SQL type, for a Key made by Owner
	err   error
	made  bool
}

// errNoKey is the error of the zero Key.
var errNoKey = errors.New("idgen: an empty Key (make one with idgen.Owner, idgen.ID or idgen.Gene)")

// Owner is the key of an owner: an int64 (bigint), a string (text), a uuid ([16]byte or a named
// 16-byte array such as uuid.UUID) or []byte (bytea).
func Owner[T OwnerValue](owner T) Key {
	b, typ, err := ownerBytes(owner)
	if err != nil {
		return Key{err: err, made: true}
	}
	return Key{gene: geneOfBytes(b), owner: owner, typ: typ, made: true}
}

// ID is the key of an id made by id_gen (0 .. 2^63-1): its gene is id >> 47.
func ID(id int64) Key {
	g, err := GeneOfID(id)
	return Key{gene: g, err: err, made: true}
}

// Gene is the key of a gene (0..65535).
func Gene[T ~int | ~int32 | ~int64 | ~uint16](gene T) Key {
	if int64(gene) < 0 || int64(gene) > MaxGene {
		return Key{err: fmt.Errorf("idgen: gene %d is outside 0..%d", int64(gene), MaxGene), made: true}
	}
	return Key{gene: uint16(gene), made: true}
}

// Gene is the gene the key routes by, or the reason it has none.
func (k Key) Gene() (uint16, error) {
	if !k.made {
		return 0, errNoKey
	}
	return k.gene, k.err
}

// String describes the key (for errors and logs).
func (k Key) String() string {
	switch {
	case !k.made:
		return "Key{}"
	case k.err != nil:
		return fmt.Sprintf("Key{error: %v}", k.err)
	case k.owner != nil:
		return fmt.Sprintf("Key{owner %v (%s), gene %d}", k.owner, k.typ, k.gene)
	default:
		return fmt.Sprintf("Key{gene %d}", k.gene)
	}
}
