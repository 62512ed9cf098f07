'use strict';
// Genes without a server: the check values of docs/routing-protocol.md §1, encodings that
// look right but are wrong, the 10,000 owners of each type in clients/gene-vectors.json
// (computed by the extension), and 64-bit ids and owners that a Number cannot hold.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const { geneOf, geneOfId, uuid } = require('..');
const { ownerBytes } = require('../lib/genes');

test('check values', () => {
  for (const [owner, gene] of [[42n, 16043], [0n, 55408], [1n, 24031], [45346343212n, 14299], [42, 16043]]) {
    assert.equal(geneOf(owner), gene, String(owner));
  }
  assert.equal(geneOf('alice'), 13795);
});

test('42 hashed any other way than 8 bytes little-endian gives another gene', () => {
  const big = Buffer.alloc(8);
  big.writeBigInt64BE(42n);
  assert.equal(geneOf(big), 0xa845);
  assert.equal(geneOf('42'), 0x0dd5);
  const four = Buffer.alloc(4);
  four.writeInt32LE(42);
  assert.equal(geneOf(four), 0x3f3e);
});

test('encodings: two\'s complement little-endian, UTF-8, a uuid\'s raw bytes', () => {
  assert.deepEqual([...ownerBytes(-1n)], Array(8).fill(0xff));
  assert.deepEqual([...ownerBytes(-(1n << 63n))], [0, 0, 0, 0, 0, 0, 0, 0x80]);
  assert.equal(geneOf('é'), geneOf(Buffer.from('é', 'utf8')));
  const u = uuid('12345678-1234-5678-1234-567812345678');
  assert.equal(geneOf(u), geneOf(Buffer.from('12345678123456781234567812345678', 'hex')));
  assert.throws(() => geneOf(1n << 63n), RangeError);
  assert.throws(() => geneOf(2 ** 53), TypeError, 'a Number beyond 2^53 is refused, not rounded');
  assert.throws(() => geneOf(null), TypeError);
  assert.throws(() => uuid('not-a-uuid'), TypeError);
});

test('the genes of 10,000 bigint, text and uuid owners equal the extension\'s', () => {
  const vectors = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'gene-vectors.json'), 'utf8'));
  assert.equal(vectors.bigint.length + vectors.text.length + vectors.uuid.length, 30000);
  const wrong = [];
  for (const [owner, gene] of vectors.bigint) if (geneOf(BigInt(owner)) !== gene) wrong.push(['bigint', owner, gene]);
  for (const [owner, gene] of vectors.text) if (geneOf(owner) !== gene) wrong.push(['text', owner, gene]);
  for (const [owner, gene] of vectors.uuid) if (geneOf(uuid(owner)) !== gene) wrong.push(['uuid', owner, gene]);
  assert.deepEqual(wrong.slice(0, 5), []);
  assert.ok(vectors.bigint.some(([o]) => BigInt(o) > 2n ** 53n), 'owners above 2^53 are among them');
});

test('ids above 2^53: their gene from a BigInt or a string, never from a rounded Number', () => {
  const id = (1234n << 47n) | 5n; // beyond 2^53
  assert.equal(geneOfId(id), 1234);
  assert.equal(geneOfId(String(id)), 1234);
  assert.throws(() => geneOfId(Number(id)), TypeError);
  assert.equal(geneOfId(9007199254740991), 63); // (2^53 - 1) >> 47
  assert.throws(() => geneOfId(-1n), RangeError);
  assert.throws(() => geneOfId(1n << 63n), RangeError);
});
