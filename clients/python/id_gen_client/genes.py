"""Genes: the 16-bit hash that places an owner (and every id of it) on a shard.

Invariants (docs/routing-protocol.md §1), equal to the extension's id_gen.shard_gene:
gene(owner) = (xxh64(b, 0) XOR murmur3_x64_128(b, 0).h1) & 0xFFFF over the owner's
canonical bytes b: an int is its 8 bytes two's-complement little-endian (int64 only),
a str its UTF-8, a uuid.UUID its 16 raw bytes, bytes-like objects themselves (no type tag).
gene_of_id(id) = id >> 47, since ids are gene << 47 | sequence; only for ids 0 .. 2**63-1
(a bigint that is not negative): anything else is refused, never masked into some gene.
"""
from __future__ import annotations

import operator
import struct
import uuid
from typing import Union

import mmh3
import xxhash

GENE_MASK = 0xFFFF
ID_GENE_SHIFT = 47
ID_MAX = (1 << 63) - 1  # the largest bigint; ids are never negative
OwnerLike = Union[int, str, uuid.UUID, bytes, bytearray, memoryview]


def owner_bytes(owner: OwnerLike) -> bytes:
    """The canonical bytes of an owner, as the extension hashes them."""
    if isinstance(owner, bool):
        raise TypeError("a bool is not an owner (use an int, str, uuid.UUID or bytes)")
    if isinstance(owner, int):
        try:
            return struct.pack("<q", owner)
        except struct.error:
            raise ValueError(f"owner {owner} is outside bigint (int64)") from None
    if isinstance(owner, str):
        return owner.encode("utf-8")
    if isinstance(owner, uuid.UUID):
        return owner.bytes
    if isinstance(owner, (bytes, bytearray, memoryview)):
        return bytes(owner)
    raise TypeError(f"cannot compute the gene of a {type(owner).__name__} owner "
                    "(use an int, str, uuid.UUID or bytes)")


def gene(owner: OwnerLike) -> int:
    """The gene 0..65535 of an owner (int, str, uuid.UUID, bytes)."""
    data = owner_bytes(owner)
    h1 = mmh3.hash64(data, seed=0, signed=False)[0]
    return (xxhash.xxh64_intdigest(data, seed=0) ^ h1) & GENE_MASK


def gene_of_id(id: int) -> int:
    """The gene of an id (a non-negative bigint made by gene_order_id): id >> 47.
    TypeError for what is not an int, ValueError for an int outside 0 .. 2**63-1."""
    return _checked_int(id, "id", ID_MAX) >> ID_GENE_SHIFT


def as_gene(g: int) -> int:
    """g as an int when it is a gene (0..65535); TypeError or ValueError otherwise."""
    return _checked_int(g, "gene", GENE_MASK)


def _checked_int(value: object, what: str, largest: int) -> int:
    """value as an int 0..largest (anything with __index__ but a bool)."""
    if not isinstance(value, bool):
        try:
            n = operator.index(value)  # type: ignore[arg-type]  # TypeError is the check
        except TypeError:
            pass
        else:
            if not 0 <= n <= largest:
                raise ValueError(f"{what} {n} is outside 0..{largest}")
            return n
    raise TypeError(f"{what} must be an int 0..{largest}, not {type(value).__name__} {value!r}")
