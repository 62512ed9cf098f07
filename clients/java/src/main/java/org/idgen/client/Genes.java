// Genes: the 16-bit hash that places an owner (and every id of it) on a shard, and the gene of
// an id.
//
// Invariants (docs/routing-protocol.md §1), equal to the extension's id_gen.shard_gene:
// - geneOf(owner) = (xxh64(b, 0) XOR murmur3_x64_128(b, 0).h1) & 0xFFFF over the owner's
//   canonical bytes b: a long is its 8 bytes two's-complement little-endian, a String its
//   UTF-8, a UUID its 16 raw bytes (big-endian, as in its text), a byte[] itself (no type tag).
// - geneOfId(id) = id >>> 47 (ids are gene << 47 | sequence), only for ids 0 .. 2^63-1.
// - Both hashes are computed here (no dependency), in wrapping 64-bit arithmetic.
package org.idgen.client;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Objects;
import java.util.UUID;

/** Genes of owners and ids. */
public final class Genes {
    /** The largest gene. */
    public static final int MAX_GENE = 0xFFFF;
    private static final int ID_GENE_SHIFT = 47;

    private Genes() {
    }

    /** The gene of a bigint owner (its 8 bytes little-endian). */
    public static int geneOf(long owner) {
        byte[] bytes = new byte[8];
        for (int i = 0; i < 8; i++) {
            bytes[i] = (byte) (owner >>> (8 * i));
        }
        return geneOf(bytes);
    }

    /** The gene of a text owner (its UTF-8 bytes). */
    public static int geneOf(String owner) {
        return geneOf(Objects.requireNonNull(owner, "owner").getBytes(StandardCharsets.UTF_8));
    }

    /** The gene of a uuid owner (its 16 raw bytes). */
    public static int geneOf(UUID owner) {
        Objects.requireNonNull(owner, "owner");
        return geneOf(ByteBuffer.allocate(16)
                .putLong(owner.getMostSignificantBits()).putLong(owner.getLeastSignificantBits()).array());
    }

    /** The gene of an owner given as its canonical bytes (a bytea owner). */
    public static int geneOf(byte[] owner) {
        Objects.requireNonNull(owner, "owner");
        return (int) ((xxh64(owner) ^ murmur3H1(owner)) & MAX_GENE);
    }

    /** The gene of an id made by gene_order_id: id >>> 47 (ids are 0 .. 2^63-1). */
    public static int geneOfId(long id) {
        if (id < 0) {
            throw new IllegalArgumentException("id " + id + " is negative: ids are 0 .. 2^63-1");
        }
        return (int) (id >>> ID_GENE_SHIFT);
    }

    /** g itself when it is a gene (0..65535). */
    static int checkGene(int g) {
        if (g < 0 || g > MAX_GENE) {
            throw new IllegalArgumentException("gene " + g + " is outside 0..65535");
        }
        return g;
    }

    // --- xxh64, seed 0 --------------------------------------------------------------------

    private static final long P1 = 0x9E3779B185EBCA87L;
    private static final long P2 = 0xC2B2AE3D27D4EB4FL;
    private static final long P3 = 0x165667B19E3779F9L;
    private static final long P4 = 0x85EBCA77C2B2AE63L;
    private static final long P5 = 0x27D4EB2F165667C5L;

    static long xxh64(byte[] b) {
        int len = b.length;
        int i = 0;
        long h;
        if (len >= 32) {
            long v1 = P1 + P2;
            long v2 = P2;
            long v3 = 0;
            long v4 = -P1;
            for (; i + 32 <= len; i += 32) {
                v1 = xxRound(v1, read64(b, i));
                v2 = xxRound(v2, read64(b, i + 8));
                v3 = xxRound(v3, read64(b, i + 16));
                v4 = xxRound(v4, read64(b, i + 24));
            }
            h = Long.rotateLeft(v1, 1) + Long.rotateLeft(v2, 7) + Long.rotateLeft(v3, 12) + Long.rotateLeft(v4, 18);
            h = xxMerge(h, v1);
            h = xxMerge(h, v2);
            h = xxMerge(h, v3);
            h = xxMerge(h, v4);
        } else {
            h = P5;
        }
        h += len;
        for (; i + 8 <= len; i += 8) {
            h = Long.rotateLeft(h ^ xxRound(0, read64(b, i)), 27) * P1 + P4;
        }
        if (i + 4 <= len) {
            h = Long.rotateLeft(h ^ (read32(b, i) * P1), 23) * P2 + P3;
            i += 4;
        }
        for (; i < len; i++) {
            h = Long.rotateLeft(h ^ ((b[i] & 0xFFL) * P5), 11) * P1;
        }
        h ^= h >>> 33;
        h *= P2;
        h ^= h >>> 29;
        h *= P3;
        return h ^ (h >>> 32);
    }

    private static long xxRound(long acc, long input) {
        return Long.rotateLeft(acc + input * P2, 31) * P1;
    }

    private static long xxMerge(long acc, long val) {
        return (acc ^ xxRound(0, val)) * P1 + P4;
    }

    // --- murmur3_x64_128, seed 0: its first half h1 --------------------------------------

    private static final long C1 = 0x87C37B91114253D5L;
    private static final long C2 = 0x4CF5AD432745937FL;

    static long murmur3H1(byte[] b) {
        int len = b.length;
        int blocks = len >>> 4;
        long h1 = 0;
        long h2 = 0;
        for (int i = 0; i < blocks; i++) {
            long k1 = Long.rotateLeft(read64(b, i * 16) * C1, 31) * C2;
            h1 = (Long.rotateLeft(h1 ^ k1, 27) + h2) * 5 + 0x52DCE729L;
            long k2 = Long.rotateLeft(read64(b, i * 16 + 8) * C2, 33) * C1;
            h2 = (Long.rotateLeft(h2 ^ k2, 31) + h1) * 5 + 0x38495AB5L;
        }
        int tail = blocks * 16;
        int rest = len & 15;
        if (rest > 8) {
            long k2 = 0;
            for (int i = rest - 1; i >= 8; i--) {
                k2 |= (b[tail + i] & 0xFFL) << ((i - 8) * 8);
            }
            h2 ^= Long.rotateLeft(k2 * C2, 33) * C1;
        }
        if (rest > 0) {
            long k1 = 0;
            for (int i = Math.min(rest, 8) - 1; i >= 0; i--) {
                k1 |= (b[tail + i] & 0xFFL) << (i * 8);
            }
            h1 ^= Long.rotateLeft(k1 * C1, 31) * C2;
        }
        h1 ^= len;
        h2 ^= len;
        h1 += h2;
        h2 += h1;
        h1 = fmix64(h1);
        h2 = fmix64(h2);
        return h1 + h2;
    }

    private static long fmix64(long k) {
        k ^= k >>> 33;
        k *= 0xFF51AFD7ED558CCDL;
        k ^= k >>> 33;
        k *= 0xC4CEB9FE1A85EC53L;
        return k ^ (k >>> 33);
    }

    private static long read64(byte[] b, int at) {
        long v = 0;
        for (int i = 7; i >= 0; i--) {
            v = (v << 8) | (b[at + i] & 0xFFL);
        }
        return v;
    }

    private static long read32(byte[] b, int at) {
        return (b[at] & 0xFFL) | (b[at + 1] & 0xFFL) << 8 | (b[at + 2] & 0xFFL) << 16 | (b[at + 3] & 0xFFL) << 24;
    }
}
