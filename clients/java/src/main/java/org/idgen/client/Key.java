// Key: what a call is routed by (docs/routing-protocol.md §5, "keys"): an owner (bigint, text,
// uuid or bytes), an id, or a gene.
//
// Invariants: a Key is immutable and always holds a valid gene (0..65535); an owner key also
// holds the owner, so that nextId can pass it to id_gen.gene_order_id with its SQL type.
package org.idgen.client;

import java.util.Arrays;
import java.util.Objects;
import java.util.UUID;

/** A routing key: {@code Key.owner(42L)}, {@code Key.owner("alice")}, {@code Key.id(id)}, {@code Key.gene(g)}. */
public final class Key {
    private final int gene;
    private final Object owner; // Long, String, UUID, byte[] (a copy), or null for an id or a gene
    private final String description;

    private Key(int gene, Object owner, String description) {
        this.gene = gene;
        this.owner = owner;
        this.description = description;
    }

    /** A bigint owner. */
    public static Key owner(long owner) {
        return new Key(Genes.geneOf(owner), owner, "owner " + owner);
    }

    /** A text owner. */
    public static Key owner(String owner) {
        return new Key(Genes.geneOf(owner), owner, "owner '" + owner + "'");
    }

    /** A uuid owner. */
    public static Key owner(UUID owner) {
        return new Key(Genes.geneOf(owner), owner, "owner " + owner);
    }

    /** An owner given as its canonical bytes (routing only: nextId takes bigint, text or uuid owners). */
    public static Key owner(byte[] owner) {
        byte[] copy = Objects.requireNonNull(owner, "owner").clone();
        return new Key(Genes.geneOf(copy), copy, "owner of " + copy.length + " bytes");
    }

    /** An id made by gene_order_id (0 .. 2^63-1): its gene is id >>> 47. */
    public static Key id(long id) {
        return new Key(Genes.geneOfId(id), null, "id " + id);
    }

    /** A gene (0..65535). */
    public static Key gene(int gene) {
        return new Key(Genes.checkGene(gene), null, "gene " + gene);
    }

    /** The gene this key routes by. */
    public int gene() {
        return gene;
    }

    /** The SQL type id_gen.gene_order_id takes this owner as. */
    String ownerSqlType() {
        if (owner instanceof Long) {
            return "bigint";
        }
        if (owner instanceof String) {
            return "text";
        }
        if (owner instanceof UUID) {
            return "uuid";
        }
        throw new IllegalArgumentException("id_gen.gene_order_id takes a bigint, text or uuid owner, not the "
                + description);
    }

    /** The owner (Long, String or UUID) of an owner key. */
    Object ownerValue() {
        return owner;
    }

    @Override
    public boolean equals(Object other) {
        if (!(other instanceof Key)) {
            return false;
        }
        Key k = (Key) other;
        return gene == k.gene && description.equals(k.description)
                && (owner instanceof byte[] ? k.owner instanceof byte[] && Arrays.equals((byte[]) owner, (byte[]) k.owner)
                                            : Objects.equals(owner, k.owner));
    }

    @Override
    public int hashCode() {
        return Objects.hash(gene, description);
    }

    @Override
    public String toString() {
        return description + " (gene " + gene + ")";
    }
}
