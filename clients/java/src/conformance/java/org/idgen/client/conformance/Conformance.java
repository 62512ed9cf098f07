// The conformance tool of the Java client (docs/routing-protocol.md §6): the same command line
// as every other client's, run by tests/cluster/test_conformance.py through ../../conformance.
//
//   conformance genes        owners on stdin (i:<bigint>, t:<text>, u:<uuid>), genes on stdout
//   conformance load ...     4 writers through one Router (see usage())
//   conformance bench ...    one client's transactions or lookups: Router, --direct or --side-by-side
//
// Invariants: a log line `owner,id` is written whole (one write) only after its transaction
// committed; every failure is counted, none ends the load; the last two stdout lines are
// `reads R empty E unknown U` and `committed N failed M retries X`; exit 0 when the load ran,
// 2 for bad arguments, 1 when the routes could not be read at the start.
package org.idgen.client.conformance;

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.UUID;
import java.util.regex.Pattern;
import org.idgen.client.CommitOutcomeUnknownException;
import org.idgen.client.Genes;
import org.idgen.client.Key;
import org.idgen.client.Router;
import org.idgen.client.Stats;

public final class Conformance {
    private static final Pattern UUID_TEXT =
            Pattern.compile("[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}");
    private static final int WRITERS = 4;

    private Conformance() {
    }

    public static void main(String[] args) {
        int status;
        if (args.length >= 1 && args[0].equals("genes")) {
            status = genes(System.in, System.out, System.err);
        } else if (args.length >= 1 && args[0].equals("load")) {
            status = load(List.of(args).subList(1, args.length));
        } else if (args.length >= 1 && args[0].equals("bench")) {
            status = Bench.bench(List.of(args).subList(1, args.length));
        } else {
            System.err.println(usage());
            status = 2;
        }
        System.out.flush();
        System.exit(status);
    }

    static String usage() {
        return "usage: conformance genes\n"
                + "       conformance load --routes DSN --shard NAME=DSN [--shard NAME=DSN ...] --table T --sequence Q\n"
                + "                        --owners N --seconds S --log FILE [--stop-file F] [--read-every K]\n"
                + "                        [--refresh-interval-ms MS] [--no-listen] [--retry-limit N]\n"
                + "                        [--backoff-max-ms MS]\n"
                + "       conformance bench (the flags of load but --log) --mode tx|lookup\n"
                + "                        [--direct | --side-by-side] [--warm-up-seconds S]";
    }

    // --- genes ------------------------------------------------------------------------------

    /** One owner per line on in (i:, t:, u:), its gene per line on out; 2 for a bad line. */
    static int genes(InputStream in, PrintStream out, PrintStream err) {
        String text;
        try {
            text = new String(in.readAllBytes(), StandardCharsets.UTF_8);
        } catch (IOException e) {
            err.println("conformance genes: " + e);
            return 1;
        }
        StringBuilder genes = new StringBuilder();
        for (String line : text.split("\n", -1)) {
            if (line.isEmpty()) {
                continue;
            }
            String value = line.substring(Math.min(2, line.length()));
            try {
                if (line.startsWith("i:")) {
                    genes.append(Genes.geneOf(Long.parseLong(value)));
                } else if (line.startsWith("t:")) {
                    genes.append(Genes.geneOf(value));
                } else if (line.startsWith("u:") && UUID_TEXT.matcher(value).matches()) {
                    genes.append(Genes.geneOf(UUID.fromString(value)));
                } else {
                    err.println("conformance genes: a line is i:<bigint>, t:<text> or u:<uuid>, not " + line);
                    return 2;
                }
            } catch (NumberFormatException e) {
                err.println("conformance genes: not a bigint: " + line);
                return 2;
            }
            genes.append('\n');
        }
        out.print(genes);
        out.flush();
        return 0;
    }

    // --- load -------------------------------------------------------------------------------

    /** The arguments of `load`. */
    static final class LoadArgs {
        Dsn routes;
        final List<String> shardNames = new ArrayList<>();
        final List<Dsn> shardDsns = new ArrayList<>();
        String table;
        String sequence;
        int owners;
        double seconds = -1;
        Path log;
        Path stopFile;
        int readEvery = 4;
        long refreshIntervalMs = 1000;
        boolean listen = true;
        /** The Router's retryLimit and largest backoff (its defaults: 20, 200 ms). */
        int retryLimit = 20;
        long backoffMaxMs = 200;
        /** bench only: "tx" or "lookup", and whether on the tool's own pools, or on both in alternating slices. */
        String mode;
        boolean direct;
        boolean sideBySide;
        /** bench only: the warm-up, not measured. */
        double warmUpSeconds = 0.5;

        static LoadArgs parse(List<String> args) {
            return parse(args, false);
        }

        static LoadArgs parse(List<String> args, boolean bench) {
            LoadArgs a = new LoadArgs();
            for (int i = 0; i < args.size(); i++) {
                String flag = args.get(i);
                if (flag.equals("--no-listen")) {
                    a.listen = false;
                    continue;
                }
                if (bench && flag.equals("--direct")) {
                    a.direct = true;
                    continue;
                }
                if (bench && flag.equals("--side-by-side")) {
                    a.sideBySide = true;
                    continue;
                }
                if (i + 1 >= args.size()) {
                    throw new IllegalArgumentException(flag + " needs a value");
                }
                String value = args.get(++i);
                switch (flag) {
                    case "--routes":
                        a.routes = Dsn.parse(value);
                        break;
                    case "--shard":
                        int eq = value.indexOf('=');
                        if (eq < 1) {
                            throw new IllegalArgumentException("--shard takes NAME=DSN, not " + value);
                        }
                        a.shardNames.add(value.substring(0, eq));
                        a.shardDsns.add(Dsn.parse(value.substring(eq + 1)));
                        break;
                    case "--table":
                        a.table = value;
                        break;
                    case "--sequence":
                        a.sequence = value;
                        break;
                    case "--owners":
                        a.owners = Integer.parseInt(value);
                        break;
                    case "--seconds":
                        a.seconds = Double.parseDouble(value);
                        break;
                    case "--log":
                        a.log = Paths.get(value);
                        break;
                    case "--stop-file":
                        a.stopFile = Paths.get(value);
                        break;
                    case "--read-every":
                        a.readEvery = Integer.parseInt(value);
                        break;
                    case "--refresh-interval-ms":
                        a.refreshIntervalMs = Long.parseLong(value);
                        break;
                    case "--retry-limit":
                        a.retryLimit = (int) nonNegative(flag, value, Integer.MAX_VALUE);
                        break;
                    case "--backoff-max-ms":
                        a.backoffMaxMs = nonNegative(flag, value, Long.MAX_VALUE / 1_000_000);
                        break;
                    case "--warm-up-seconds":
                        double w = bench ? Double.parseDouble(value) : Double.NaN;
                        if (!(w >= 0 && w <= 3600)) {
                            throw new IllegalArgumentException("--warm-up-seconds takes 0 to 3600 seconds (bench only), not "
                                    + value);
                        }
                        a.warmUpSeconds = w;
                        break;
                    case "--mode":
                        if (!bench || !(value.equals("tx") || value.equals("lookup"))) {
                            throw new IllegalArgumentException("--mode takes tx or lookup (bench only), not " + value);
                        }
                        a.mode = value;
                        break;
                    default:
                        throw new IllegalArgumentException("unknown argument " + flag);
                }
            }
            if (a.routes == null || a.shardNames.isEmpty() || a.table == null || a.sequence == null
                    || (a.log == null && !bench) || (a.mode == null && bench) || a.seconds < 0) {
                throw new IllegalArgumentException("--routes, --shard, --table, --sequence, --owners, --seconds and "
                        + "--log are required");
            }
            if (a.direct && a.sideBySide) {
                throw new IllegalArgumentException("--direct and --side-by-side exclude each other");
            }
            if (a.owners < 1 || a.readEvery < 0 || a.refreshIntervalMs < 0) {
                throw new IllegalArgumentException("--owners is 1 or more; --read-every and --refresh-interval-ms 0 or more");
            }
            return a;
        }

        /** A decimal integer 0 .. max (digits only, no sign) given to flag. */
        private static long nonNegative(String flag, String value, long max) {
            if (!value.matches("[0-9]+")) {
                throw new IllegalArgumentException(flag + " takes an integer 0 or more, not " + value);
            }
            try {
                long n = Long.parseLong(value);
                if (n <= max) {
                    return n;
                }
            } catch (NumberFormatException tooLarge) {
                // (reported below)
            }
            throw new IllegalArgumentException(flag + " takes an integer 0 to " + max + ", not " + value);
        }

        /**
         * The Router's retryLimit and backoff from --retry-limit and --backoff-max-ms (the first
         * delay, 5 ms by default, lowered to the largest when that is below it).
         */
        Router.Builder retrySettings(Router.Builder builder) {
            Duration max = Duration.ofMillis(backoffMaxMs);
            Duration base = Duration.ofMillis(Math.min(DEFAULT_BACKOFF_BASE_MS, backoffMaxMs));
            return builder.retryLimit(retryLimit).backoff(base, max);
        }
    }

    /** The Router's default first backoff delay (Router.Builder.backoff). */
    static final long DEFAULT_BACKOFF_BASE_MS = 5;

    static int load(List<String> argv) {
        LoadArgs args;
        try {
            args = LoadArgs.parse(argv);
        } catch (IllegalArgumentException e) { // (NumberFormatException too)
            System.err.println("conformance load: " + e.getMessage() + "\n" + usage());
            return 2;
        }
        Router.Builder builder = Router.builder().routes(args.routes.url, args.routes.properties)
                .listen(args.listen).refreshInterval(Duration.ofMillis(args.refreshIntervalMs))
                .maxPoolSize(WRITERS);
        args.retrySettings(builder);
        for (int i = 0; i < args.shardNames.size(); i++) {
            builder.shard(args.shardNames.get(i), args.shardDsns.get(i).url, args.shardDsns.get(i).properties);
        }
        Stats stats;
        Load load;
        try (Router router = builder.build()) {
            load = new Load(router, args);
            load.run();
            stats = router.stats();
        } catch (SQLException e) {
            System.err.println("conformance load: the routes could not be read: " + e);
            return 1;
        } catch (IOException e) {
            System.err.println("conformance load: " + e);
            return 1;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            System.err.println("conformance load: interrupted");
            return 1;
        }
        long retries = stats.retriesMoved() + stats.retriesFenced() + stats.retriesLost();
        System.out.println("reads " + load.reads + " empty " + load.empty + " unknown " + load.unknown);
        System.out.println("committed " + load.committed + " failed " + load.failed + " retries " + retries);
        System.out.flush();
        return 0;
    }

    /** The 4 writers of `load` and their counts (guarded by this). */
    static final class Load {
        private final Router router;
        private final LoadArgs args;
        private final long deadline;
        private final String insert;
        private final String read;
        long committed;
        long failed;
        long reads;
        long empty;
        long unknown;

        Load(Router router, LoadArgs args) {
            this.router = router;
            this.args = args;
            this.deadline = System.nanoTime() + (long) (args.seconds * 1e9);
            this.insert = "INSERT INTO " + args.table + " (id, owner_id) VALUES (id_gen.gene_order_id(?::text, "
                    + "?::bigint), ?) RETURNING id";
            this.read = "SELECT count(*) FROM " + args.table + " WHERE id BETWEEN ? AND ? AND owner_id = ?";
        }

        void run() throws IOException, InterruptedException {
            try (OutputStream log = new FileOutputStream(args.log.toFile(), true)) {
                List<Thread> writers = new ArrayList<>();
                for (int seed = 0; seed < WRITERS; seed++) {
                    int s = seed;
                    Thread t = new Thread(() -> writer(s, log), "writer-" + seed);
                    writers.add(t);
                    t.start();
                }
                for (Thread t : writers) {
                    t.join(); // (each ends by the deadline or the stop file; every call it makes is bounded)
                }
            }
        }

        private boolean done() {
            return System.nanoTime() - deadline > 0 || (args.stopFile != null && Files.exists(args.stopFile));
        }

        private void writer(int seed, OutputStream log) {
            Random rng = new Random(seed);
            List<Long> mine = new ArrayList<>();
            Set<Long> seen = new HashSet<>();
            for (long iteration = 1; !done(); iteration++) {
                long owner = 1 + rng.nextInt(args.owners);
                Long id = null;
                try {
                    id = router.transaction(Key.owner(owner), conn -> {
                        try (PreparedStatement ps = conn.prepareStatement(insert)) {
                            ps.setString(1, args.sequence);
                            ps.setLong(2, owner);
                            ps.setLong(3, owner);
                            try (ResultSet rs = ps.executeQuery()) {
                                rs.next();
                                return rs.getLong(1);
                            }
                        }
                    });
                } catch (SQLException | RuntimeException e) { // a failed transaction is counted, never fatal
                    failed("transaction", e);
                }
                if (id != null) {
                    logCommitted(log, owner, id);
                    if (seen.add(owner)) {
                        mine.add(owner);
                    }
                }
                if (args.readEvery > 0 && iteration % args.readEvery == 0 && !mine.isEmpty()) {
                    readOne(mine.get(rng.nextInt(mine.size())));
                }
            }
        }

        private synchronized void logCommitted(OutputStream log, long owner, long id) {
            try {
                log.write((owner + "," + id + "\n").getBytes(StandardCharsets.UTF_8)); // (one write: the line whole)
                log.flush();
            } catch (IOException e) { // (loud: the writer ends with it)
                throw new UncheckedIOException("the log cannot be written", e);
            }
            committed++;
        }

        private void readOne(long owner) {
            long lo = (long) Genes.geneOf(owner) << 47;
            long hi = lo | ((1L << 47) - 1);
            try {
                List<Object[]> rows = router.execute(Key.owner(owner), read, lo, hi, owner);
                boolean none = rows.isEmpty() || ((Number) rows.get(0)[0]).longValue() == 0;
                synchronized (this) {
                    reads++;
                    if (none) {
                        empty++;
                    }
                }
            } catch (SQLException | RuntimeException e) {
                failed("read", e);
            }
        }

        private synchronized void failed(String what, Exception e) {
            failed++;
            if (e instanceof CommitOutcomeUnknownException) {
                unknown++;
            }
            if (failed <= 5) {
                System.err.println("failed " + what + ": " + e);
                System.err.flush();
            }
        }
    }

}
