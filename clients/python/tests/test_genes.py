"""Genes without a server: the check values of docs/routing-protocol.md §1, the encodings
that look right but are wrong, the gene of an id, and the 10,000 owners of each type in
clients/gene-vectors.json (written by the extension; every client checks the same file)."""
import json
import os
import struct
import unittest
import uuid

from id_gen_client import gene, gene_of_id, owner_bytes


class CheckValues(unittest.TestCase):
    def test_bigints(self):
        for owner, expected in [(42, 16043), (0, 55408), (1, 24031), (45346343212, 14299)]:
            self.assertEqual(gene(owner), expected, owner)

    def test_text(self):
        self.assertEqual(gene("alice"), 13795)

    def test_range(self):
        for owner in [-1, -(1 << 63), (1 << 63) - 1, "", "中文🙂", b"", uuid.uuid4()]:
            self.assertTrue(0 <= gene(owner) <= 0xFFFF)


class SharedVectors(unittest.TestCase):
    def test_the_genes_of_the_shared_vectors_equal_the_extensions(self):
        with open(os.path.join(os.path.dirname(__file__), "..", "..", "gene-vectors.json"), encoding="utf-8") as f:
            vectors = json.load(f)
        wrong = [("bigint", o, g) for o, g in vectors["bigint"] if gene(int(o)) != g]
        wrong += [("text", o, g) for o, g in vectors["text"] if gene(o) != g]
        wrong += [("uuid", o, g) for o, g in vectors["uuid"] if gene(uuid.UUID(o)) != g]
        self.assertEqual(sum(len(vectors[k]) for k in ("bigint", "text", "uuid")), 30000)
        self.assertEqual(wrong[:3], [])


class WrongEncodings(unittest.TestCase):
    """42 hashed any other way than 8 bytes little-endian gives another gene."""

    def test_big_endian(self):
        self.assertEqual(gene(struct.pack(">q", 42)), 0xA845)

    def test_text_of_the_number(self):
        self.assertEqual(gene("42"), 0x0DD5)

    def test_four_bytes(self):
        self.assertEqual(gene(struct.pack("<i", 42)), 0x3F3E)

    def test_int_is_its_little_endian_bytes(self):
        self.assertEqual(gene(42), gene(struct.pack("<q", 42)))
        self.assertNotEqual(gene(42), gene("42"))


class Encodings(unittest.TestCase):
    def test_negative_is_twos_complement_little_endian(self):
        self.assertEqual(owner_bytes(-1), b"\xff" * 8)
        self.assertEqual(owner_bytes(-2), b"\xfe" + b"\xff" * 7)
        self.assertEqual(owner_bytes(-(1 << 63)), b"\x00" * 7 + b"\x80")
        self.assertEqual(gene(-5), gene((-5 & (2**64 - 1)).to_bytes(8, "little")))

    def test_outside_int64(self):
        for owner in [1 << 63, -(1 << 63) - 1]:
            with self.assertRaises(ValueError):
                gene(owner)

    def test_text_is_utf8(self):
        self.assertEqual(gene("é"), gene("é".encode("utf-8")))

    def test_uuid_is_its_raw_bytes(self):
        u = uuid.UUID("12345678-1234-5678-1234-567812345678")
        self.assertEqual(gene(u), gene(u.bytes))

    def test_bytes_like(self):
        raw = b"\x01\x02\x03"
        self.assertEqual(gene(bytearray(raw)), gene(raw))
        self.assertEqual(gene(memoryview(raw)), gene(raw))

    def test_not_an_owner(self):
        for owner in [True, 1.5, None, [1]]:
            with self.assertRaises(TypeError):
                gene(owner)


class GeneOfId(unittest.TestCase):
    def test_shift(self):
        for g in [0, 1, 13795, 0xFFFF]:
            for seq in [0, 1, (1 << 47) - 1]:
                self.assertEqual(gene_of_id((g << 47) | seq), g)

    def test_owner_id_round_trip(self):
        g = gene(42)
        self.assertEqual(gene_of_id((g << 47) | 12345), g)

    def test_largest_id(self):
        self.assertEqual(gene_of_id((1 << 63) - 1), 0xFFFF)

    def test_is_id_shifted_by_47(self):
        self.assertEqual(gene_of_id(12345678901234567), 12345678901234567 >> 47)

    def test_refuses_ints_outside_bigint_ids(self):
        for bad in [-1, -(1 << 47), -(1 << 63), 1 << 63, 1 << 64]:
            with self.assertRaisesRegex(ValueError, f"id {bad} is outside 0..{(1 << 63) - 1}"):
                gene_of_id(bad)

    def test_refuses_what_is_not_an_int(self):
        for bad in ["5", 5.0, True, None, b"\x05"]:
            with self.assertRaisesRegex(TypeError, "id must be an int"):
                gene_of_id(bad)


if __name__ == "__main__":
    unittest.main()
