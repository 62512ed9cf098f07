// Stats: a snapshot of a Router's counters (docs/routing-protocol.md §5, `stats`). Immutable.
package org.idgen.client;

/** Counters of a Router, as of the call to {@link Router#stats()}. */
public final class Stats {
    private final long transactions;
    private final long retriesMoved;
    private final long retriesFenced;
    private final long retriesLost;
    private final long refreshes;

    Stats(long transactions, long retriesMoved, long retriesFenced, long retriesLost, long refreshes) {
        this.transactions = transactions;
        this.retriesMoved = retriesMoved;
        this.retriesFenced = retriesFenced;
        this.retriesLost = retriesLost;
        this.refreshes = refreshes;
    }

    /** Transactions (and execute statements) committed. */
    public long transactions() {
        return transactions;
    }

    /** Retries after IG001 (route changed). */
    public long retriesMoved() {
        return retriesMoved;
    }

    /** Retries after IG002 (route fenced). */
    public long retriesFenced() {
        return retriesFenced;
    }

    /** Retries after a shard connection refused or lost before COMMIT was sent. */
    public long retriesLost() {
        return retriesLost;
    }

    /** Route reads that succeeded (the first one included). */
    public long refreshes() {
        return refreshes;
    }

    @Override
    public String toString() {
        return "Stats{transactions=" + transactions + ", retriesMoved=" + retriesMoved + ", retriesFenced="
                + retriesFenced + ", retriesLost=" + retriesLost + ", refreshes=" + refreshes + "}";
    }
}
