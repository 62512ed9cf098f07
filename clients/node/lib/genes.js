'use strict';
// Genes: the 16-bit hash that places an owner (and every id of it) on a shard.
//
// Invariants (docs/routing-protocol.md §1), equal to the extension's id_gen.shard_gene:
// gene(owner) = (xxh64(b, 0) XOR murmur3_x64_128(b, 0).h1) & 0xFFFF over the owner's
// canonical bytes b: a bigint is its 8 bytes two's-complement little-endian (int64 only), a
// string its UTF-8, a Uuid its 16 raw bytes, a Uint8Array (Buffer) itself (no type tag).
// geneOfId(id) = id >> 47, since ids are gene << 47 | sequence, only for ids 0 .. 2^63-1.
// Ids and owners are 64-bit: they are BigInts (or decimal strings) here, and a Number is
// taken only when it is a safe integer, never rounded.

const MASK64 = (1n << 64n) - 1n;
const GENE_MASK = 0xffff;
const ID_GENE_SHIFT = 47n;
const ID_MAX = (1n << 63n) - 1n;
const INT64_MIN = -(1n << 63n);

const rotl = (x, r) => ((x << r) | (x >> (64n - r))) & MASK64;
const mul = (a, b) => (a * b) & MASK64;
const add = (a, b) => (a + b) & MASK64;

function read64(bytes, at) {
  let v = 0n;
  for (let i = 7; i >= 0; i--) v = (v << 8n) | BigInt(bytes[at + i]);
  return v;
}

function read32(bytes, at) {
  return BigInt((bytes[at] | (bytes[at + 1] << 8) | (bytes[at + 2] << 16)) + bytes[at + 3] * 0x1000000);
}

const P1 = 11400714785074694791n;
const P2 = 14029467366897019727n;
const P3 = 1609587929392839161n;
const P4 = 9650029242287828579n;
const P5 = 2870177450012600261n;

function xxRound(acc, input) {
  return mul(rotl(add(acc, mul(input, P2)), 31n), P1);
}

function xxMerge(acc, val) {
  return add(mul(acc ^ xxRound(0n, val), P1), P4);
}

/** xxh64 of bytes with seed 0, as a BigInt. */
function xxh64(bytes) {
  const len = bytes.length;
  let i = 0;
  let h;
  if (len >= 32) {
    let v1 = add(P1, P2);
    let v2 = P2;
    let v3 = 0n;
    let v4 = (0n - P1) & MASK64;
    for (; i + 32 <= len; i += 32) {
      v1 = xxRound(v1, read64(bytes, i));
      v2 = xxRound(v2, read64(bytes, i + 8));
      v3 = xxRound(v3, read64(bytes, i + 16));
      v4 = xxRound(v4, read64(bytes, i + 24));
    }
    h = add(add(rotl(v1, 1n), rotl(v2, 7n)), add(rotl(v3, 12n), rotl(v4, 18n)));
    h = xxMerge(xxMerge(xxMerge(xxMerge(h, v1), v2), v3), v4);
  } else {
    h = P5;
  }
  h = add(h, BigInt(len));
  for (; i + 8 <= len; i += 8) {
    h = add(mul(rotl(h ^ xxRound(0n, read64(bytes, i)), 27n), P1), P4);
  }
  if (i + 4 <= len) {
    h = add(mul(rotl(h ^ mul(read32(bytes, i), P1), 23n), P2), P3);
    i += 4;
  }
  for (; i < len; i++) {
    h = mul(rotl(h ^ mul(BigInt(bytes[i]), P5), 11n), P1);
  }
  h ^= h >> 33n;
  h = mul(h, P2);
  h ^= h >> 29n;
  h = mul(h, P3);
  return h ^ (h >> 32n);
}

const C1 = 0x87c37b91114253d5n;
const C2 = 0x4cf5ad432745937fn;

function fmix64(k) {
  k ^= k >> 33n;
  k = mul(k, 0xff51afd7ed558ccdn);
  k ^= k >> 33n;
  k = mul(k, 0xc4ceb9fe1a85ec53n);
  return k ^ (k >> 33n);
}

/** The first half (h1) of murmur3_x64_128 of bytes with seed 0, as a BigInt. */
function murmur3H1(bytes) {
  const len = bytes.length;
  const blocks = len >> 4;
  let h1 = 0n;
  let h2 = 0n;
  for (let b = 0; b < blocks; b++) {
    const k1 = mul(rotl(mul(read64(bytes, b * 16), C1), 31n), C2);
    h1 = add(mul(add(rotl(h1 ^ k1, 27n), h2), 5n), 0x52dce729n);
    const k2 = mul(rotl(mul(read64(bytes, b * 16 + 8), C2), 33n), C1);
    h2 = add(mul(add(rotl(h2 ^ k2, 31n), h1), 5n), 0x38495ab5n);
  }
  const tail = blocks * 16;
  const rest = len & 15;
  if (rest > 8) {
    let k2 = 0n;
    for (let i = rest - 1; i >= 8; i--) k2 |= BigInt(bytes[tail + i]) << BigInt((i - 8) * 8);
    h2 ^= mul(rotl(mul(k2, C2), 33n), C1);
  }
  if (rest > 0) {
    let k1 = 0n;
    for (let i = Math.min(rest, 8) - 1; i >= 0; i--) k1 |= BigInt(bytes[tail + i]) << BigInt(i * 8);
    h1 ^= mul(rotl(mul(k1, C1), 31n), C2);
  }
  h1 ^= BigInt(len);
  h2 ^= BigInt(len);
  h1 = add(h1, h2);
  h2 = add(h2, h1);
  h1 = fmix64(h1);
  h2 = fmix64(h2);
  return add(h1, h2);
}

/** An owner that is a UUID: hashed as its 16 raw bytes (uuid('...') makes one). */
class Uuid {
  constructor(text) {
    const hex = String(text).replace(/-/g, '');
    if (!/^[0-9a-fA-F]{32}$/.test(hex)) throw new TypeError(`not a UUID: ${text}`);
    this.text = hex.replace(/^(.{8})(.{4})(.{4})(.{4})(.{12})$/, '$1-$2-$3-$4-$5').toLowerCase();
    this.bytes = Uint8Array.from(Buffer.from(hex, 'hex'));
    Object.freeze(this);
  }

  toString() {
    return this.text;
  }
}

const uuid = (text) => new Uuid(text);

/** A 64-bit integer argument (BigInt, safe-integer Number, or decimal string) as a BigInt. */
function toBigInt(value, what) {
  if (typeof value === 'bigint') return value;
  if (typeof value === 'number') {
    if (!Number.isSafeInteger(value)) {
      throw new TypeError(`${what} ${value} is not a safe integer: pass a BigInt or a decimal string`);
    }
    return BigInt(value);
  }
  if (typeof value === 'string' && /^-?[0-9]+$/.test(value)) return BigInt(value);
  throw new TypeError(`${what} must be a BigInt, a safe integer or a decimal string, not ${typeof value} ${String(value)}`);
}

/** The canonical bytes of an owner, as the extension hashes them. */
function ownerBytes(owner) {
  if (typeof owner === 'bigint' || typeof owner === 'number') {
    const n = toBigInt(owner, 'owner');
    if (n < INT64_MIN || n > ID_MAX) throw new RangeError(`owner ${n} is outside bigint (int64)`);
    const out = new Uint8Array(8);
    let u = BigInt.asUintN(64, n);
    for (let i = 0; i < 8; i++) {
      out[i] = Number(u & 0xffn);
      u >>= 8n;
    }
    return out;
  }
  if (typeof owner === 'string') return new TextEncoder().encode(owner);
  if (owner instanceof Uuid) return owner.bytes;
  if (owner instanceof Uint8Array) return owner;
  throw new TypeError(`cannot compute the gene of ${owner === null ? 'null' : typeof owner} (use a BigInt, a string, a Uuid or bytes)`);
}

/** The gene 0..65535 of an owner (BigInt or safe integer, string, Uuid, Uint8Array). */
function geneOf(owner) {
  const data = ownerBytes(owner);
  return Number((xxh64(data) ^ murmur3H1(data)) & BigInt(GENE_MASK));
}

/** The gene of an id (a non-negative bigint made by gene_order_id): id >> 47. */
function geneOfId(id) {
  const n = toBigInt(id, 'id');
  if (n < 0n || n > ID_MAX) throw new RangeError(`id ${n} is outside 0..${ID_MAX}`);
  return Number(n >> ID_GENE_SHIFT);
}

/** g when it is a gene (an integer 0..65535). */
function asGene(g) {
  if (typeof g === 'bigint') g = Number(g);
  if (!Number.isInteger(g)) throw new TypeError(`gene must be an integer 0..65535, not ${String(g)}`);
  if (g < 0 || g > GENE_MASK) throw new RangeError(`gene ${g} is outside 0..65535`);
  return g;
}

module.exports = { geneOf, geneOfId, asGene, ownerBytes, toBigInt, Uuid, uuid, xxh64, murmur3H1 };
