// Route: one range of genes (inclusive) and the shard that owns it, as read from
// id_gen.route_map. Immutable.
package org.idgen.client;

import java.util.Objects;

/** Genes lowerGene .. upperGene (inclusive) live on shard. */
public final class Route {
    private final int lowerGene;
    private final int upperGene;
    private final String shard;

    public Route(int lowerGene, int upperGene, String shard) {
        this.lowerGene = lowerGene;
        this.upperGene = upperGene;
        this.shard = Objects.requireNonNull(shard, "shard");
    }

    public int lowerGene() {
        return lowerGene;
    }

    public int upperGene() {
        return upperGene;
    }

    public String shard() {
        return shard;
    }

    @Override
    public boolean equals(Object other) {
        if (!(other instanceof Route)) {
            return false;
        }
        Route r = (Route) other;
        return lowerGene == r.lowerGene && upperGene == r.upperGene && shard.equals(r.shard);
    }

    @Override
    public int hashCode() {
        return Objects.hash(lowerGene, upperGene, shard);
    }

    @Override
    public String toString() {
        return lowerGene + ".." + upperGene + " -> " + shard;
    }
}
