// WireServer: a minimal PostgreSQL server (protocol 3, no authentication, text results) on
// 127.0.0.1 for tests of the production path — pgjdbc and HikariCP through JdbcConnector —
// without a real server. It answers each statement through a Script and records, per
// connection, its startup parameters and its round trips (the statements executed between
// two Syncs, or of one simple Query), so a test sees what pgjdbc really sends.
//
// Invariants: every statement goes to the Script (never guessed here) except the protocol's
// own (BEGIN/COMMIT/ROLLBACK, pgjdbc's and Hikari's checks); a statement the Script answers
// with the tag BEGIN opens a transaction block, as BEGIN does (a claim on BEGIN), and one it
// refuses opens none; COMMIT or ROLLBACK outside a block draws WARNING 25P01, as on a server;
// after an error the extended protocol's messages are skipped until Sync, as a server does;
// every blocking read ends when close() closes the sockets.
package org.idgen.client;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

final class WireServer implements AutoCloseable {
    private static final int INT8 = 20;
    private static final int TEXT = 25;

    /** The answer to one statement. */
    static final class Reply {
        final String tag;
        final List<String> columns;
        final List<List<Object>> rows;
        final String errorCode; // an ERROR (or a FATAL that ends the connection, when fatal)
        final boolean fatal;
        final boolean vanish; // close the socket without an answer
        final boolean silent; // answer nothing more, the socket left open (a frozen server)

        private Reply(String tag, List<String> columns, List<List<Object>> rows, String errorCode, boolean fatal,
                      boolean vanish) {
            this(tag, columns, rows, errorCode, fatal, vanish, false);
        }

        private Reply(String tag, List<String> columns, List<List<Object>> rows, String errorCode, boolean fatal,
                      boolean vanish, boolean silent) {
            this.silent = silent;
            this.tag = tag;
            this.columns = columns;
            this.rows = rows;
            this.errorCode = errorCode;
            this.fatal = fatal;
            this.vanish = vanish;
        }

        static Reply command(String tag) {
            return new Reply(tag, null, null, null, false, false);
        }

        /** Rows of columns; a Long is sent as int8, anything else as text (null as NULL). */
        static Reply rows(List<String> columns, List<List<Object>> rows) {
            return new Reply("SELECT " + rows.size(), columns, rows, null, false, false);
        }

        static Reply row(String column, Object value) {
            return rows(List.of(column), List.of(Collections.singletonList(value)));
        }

        static Reply error(String code) {
            return new Reply(null, null, null, code, false, false);
        }

        static Reply fatal(String code) {
            return new Reply(null, null, null, code, true, false);
        }

        static Reply vanish() {
            return new Reply(null, null, null, null, false, true);
        }

        /** No answer, ever: reads and drops what comes until the client closes the socket. */
        static Reply silence() {
            return new Reply(null, null, null, null, false, false, true);
        }
    }

    /**
     * The node's behaviour: the answer to a statement of the caller's (params as text); for
     * BEGIN/COMMIT/ROLLBACK null (the usual answer) or vanish. Asked once per execution.
     */
    interface Script {
        Reply answer(Session session, String sql, List<String> params);
    }

    /** One round trip: statements executed, each with its parameters. */
    static final class RoundTrip {
        final boolean simple;
        final List<String> statements = new ArrayList<>();
        final List<List<String>> params = new ArrayList<>();

        RoundTrip(boolean simple) {
            this.simple = simple;
        }

        @Override
        public String toString() {
            return (simple ? "Q" : "P") + statements;
        }
    }

    private final ServerSocket listener;
    private final Script script;
    private final List<Session> sessions = Collections.synchronizedList(new ArrayList<>());
    private final Thread acceptor;
    private volatile boolean closed;

    WireServer(Script script) throws IOException {
        this.script = script;
        this.listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        this.acceptor = new Thread(this::acceptLoop, "wire-server-" + listener.getLocalPort());
        acceptor.setDaemon(true);
        acceptor.start();
    }

    String url() {
        return "jdbc:postgresql://127.0.0.1:" + listener.getLocalPort() + "/postgres";
    }

    List<Session> sessions() {
        synchronized (sessions) {
            return new ArrayList<>(sessions);
        }
    }

    /** Every round trip of every connection, in order per connection. */
    List<RoundTrip> roundTrips() {
        List<RoundTrip> all = new ArrayList<>();
        for (Session s : sessions()) {
            synchronized (s) {
                all.addAll(s.roundTrips);
            }
        }
        return all;
    }

    /** Sends NOTIFY channel payload to every connection that LISTENs on it. */
    void notifyListeners(String channel, String payload) throws IOException {
        for (Session s : sessions()) {
            if (s.listening.contains(channel) && !s.socket.isClosed()) {
                s.send('A', buf -> {
                    buf.writeInt(4242);
                    cstring(buf, channel);
                    cstring(buf, payload);
                });
            }
        }
    }

    /** Ends every connection that LISTENs, as a coordinator restart would. */
    void dropListeners() throws IOException {
        for (Session s : sessions()) {
            if (!s.listening.isEmpty()) {
                s.socket.close();
            }
        }
    }

    @Override
    public void close() throws IOException {
        closed = true;
        listener.close();
        for (Session s : sessions()) {
            s.socket.close();
        }
    }

    private void acceptLoop() {
        while (!closed) {
            try {
                Socket socket = listener.accept();
                socket.setTcpNoDelay(true); // (each message is flushed: no Nagle delays)
                Session s = new Session(socket);
                sessions.add(s);
                Thread t = new Thread(s::serve, "wire-session");
                t.setDaemon(true);
                t.start();
            } catch (IOException e) {
                return; // (closed)
            }
        }
    }

    private interface Body {
        void write(DataOutputStream out) throws IOException;
    }

    private static void cstring(DataOutputStream out, String s) throws IOException {
        out.write(s.getBytes(StandardCharsets.UTF_8));
        out.write(0);
    }

    /** One client connection. */
    final class Session {
        final Socket socket;
        final Map<String, String> startup = new LinkedHashMap<>();
        final List<RoundTrip> roundTrips = new ArrayList<>();
        final List<String> listening = Collections.synchronizedList(new ArrayList<>());
        private DataInputStream in;
        private DataOutputStream out;
        private char status = 'I'; // ReadyForQuery: I idle, T in a block, E failed block
        private final Map<String, String> prepared = new HashMap<>();
        private final Map<String, String> portals = new HashMap<>();
        private final Map<String, List<String>> portalParams = new HashMap<>();
        private final Map<String, Reply> portalReplies = new HashMap<>(); // (answered at Describe)
        private RoundTrip current;
        private boolean skipping; // after an error, until Sync

        Session(Socket socket) {
            this.socket = socket;
        }

        private void serve() {
            try (Socket s = socket) {
                in = new DataInputStream(s.getInputStream());
                out = new DataOutputStream(s.getOutputStream());
                if (!startup()) {
                    return;
                }
                for (;;) {
                    int type = in.read();
                    if (type < 0 || type == 'X') {
                        return;
                    }
                    byte[] body = new byte[in.readInt() - 4];
                    in.readFully(body);
                    if (!message((char) type, ByteBuffer.wrap(body))) {
                        return;
                    }
                }
            } catch (IOException e) {
                // (the client went away, or close())
            }
        }

        private boolean startup() throws IOException {
            for (;;) {
                int length = in.readInt();
                int code = in.readInt();
                if (code == 80877103 || code == 80877104) { // SSLRequest, GSSENCRequest: no
                    out.write('N');
                    out.flush();
                    continue;
                }
                byte[] body = new byte[length - 8];
                in.readFully(body);
                if (code != 196608) {
                    return false; // (a CancelRequest)
                }
                ByteBuffer b = ByteBuffer.wrap(body);
                for (String key = string(b); !key.isEmpty(); key = string(b)) {
                    synchronized (this) {
                        startup.put(key, string(b));
                    }
                }
                break;
            }
            send('R', o -> o.writeInt(0));
            Map<String, String> parameters = new LinkedHashMap<>();
            parameters.put("server_version", "15.0");
            parameters.put("server_encoding", "UTF8");
            parameters.put("client_encoding", "UTF8");
            parameters.put("DateStyle", "ISO, MDY");
            parameters.put("integer_datetimes", "on");
            parameters.put("standard_conforming_strings", "on");
            parameters.put("TimeZone", "UTC");
            parameters.put("is_superuser", "on");
            for (Map.Entry<String, String> p : parameters.entrySet()) {
                send('S', o -> {
                    cstring(o, p.getKey());
                    cstring(o, p.getValue());
                });
            }
            send('K', o -> {
                o.writeInt(4242);
                o.writeInt(7);
            });
            ready();
            return true;
        }

        /** Handles one message; false when the connection ends. */
        private boolean message(char type, ByteBuffer b) throws IOException {
            switch (type) {
                case 'Q': {
                    RoundTrip trip = trip(true);
                    for (String sql : string(b).split(";")) {
                        if (!sql.trim().isEmpty() && !statement(trip, sql.trim(), List.of(), null)) {
                            break;
                        }
                    }
                    if (socket.isClosed()) {
                        return false;
                    }
                    current = null;
                    skipping = false;
                    ready();
                    return true;
                }
                case 'S':
                    current = null;
                    skipping = false;
                    ready();
                    return true;
                case 'H':
                    out.flush();
                    return true;
                default:
                    if (skipping) {
                        return true;
                    }
                    return extended(type, b);
            }
        }

        private boolean extended(char type, ByteBuffer b) throws IOException {
            switch (type) {
                case 'P': {
                    String name = string(b);
                    prepared.put(name, string(b));
                    send('1', o -> { });
                    return true;
                }
                case 'B': {
                    String portal = string(b);
                    String statement = string(b);
                    short[] formats = new short[b.getShort()];
                    for (int i = 0; i < formats.length; i++) {
                        formats[i] = b.getShort();
                    }
                    List<String> params = new ArrayList<>();
                    int n = b.getShort();
                    for (int i = 0; i < n; i++) {
                        int len = b.getInt();
                        if (len < 0) {
                            params.add(null);
                            continue;
                        }
                        byte[] v = new byte[len];
                        b.get(v);
                        boolean binary = formats.length == 1 ? formats[0] == 1 : formats.length > i && formats[i] == 1;
                        params.add(!binary ? new String(v, StandardCharsets.UTF_8)
                                : len == 8 ? String.valueOf(ByteBuffer.wrap(v).getLong())
                                : len == 4 ? String.valueOf(ByteBuffer.wrap(v).getInt()) : "<binary " + len + ">");
                    }
                    portals.put(portal, prepared.get(statement));
                    portalParams.put(portal, params);
                    portalReplies.remove(portal);
                    send('2', o -> { });
                    return true;
                }
                case 'D': {
                    char what = (char) b.get();
                    String name = string(b);
                    if (what == 'S') {
                        throw new IOException("the wire server does not describe statements: " + prepared.get(name));
                    }
                    String sql = portals.get(name).trim();
                    Reply reply = sql.isEmpty() || isTransactionControl(sql) ? null : answer(sql, portalParams.get(name));
                    portalReplies.put(name, reply);
                    if (reply != null && reply.columns != null) {
                        rowDescription(reply);
                    } else {
                        send('n', o -> { });
                    }
                    return true;
                }
                case 'E': {
                    String portal = string(b);
                    statement(trip(false), portals.get(portal), portalParams.get(portal), portalReplies.remove(portal));
                    return !socket.isClosed();
                }
                case 'C':
                    send('3', o -> { });
                    return true;
                default:
                    throw new IOException("the wire server does not know message " + type);
            }
        }

        private RoundTrip trip(boolean simple) {
            synchronized (this) {
                if (current == null) {
                    current = new RoundTrip(simple);
                    roundTrips.add(current);
                }
                return current;
            }
        }

        private boolean isTransactionControl(String sql) {
            return sql.equals("BEGIN") || sql.equals("COMMIT") || sql.equals("ROLLBACK");
        }

        private Reply answer(String sql, List<String> params) {
            if (sql.equals("SHOW TRANSACTION ISOLATION LEVEL")) {
                return Reply.row("transaction_isolation", "read committed");
            }
            if (sql.startsWith("LISTEN ")) {
                listening.add(sql.substring(7).trim());
                return Reply.command("LISTEN");
            }
            Reply reply = script.answer(this, sql, params);
            if (reply == null) {
                System.err.println("wire server: no answer for " + sql);
            }
            return reply != null ? reply : Reply.error("XX000"); // (a statement the script does not know)
        }

        /** A frozen server: until the client closes the connection, nothing is answered. */
        private boolean silent() throws IOException {
            byte[] sink = new byte[1024];
            while (in.read(sink) >= 0) {
                // (dropped)
            }
            socket.close();
            return false;
        }

        /**
         * Executes one statement (described: its answer, asked at Describe); false when the
         * connection ended or an error skips the rest of the message.
         */
        private boolean statement(RoundTrip trip, String sql, List<String> params, Reply described)
                throws IOException {
            String s = sql.trim();
            synchronized (this) {
                trip.statements.add(s);
                trip.params.add(params);
            }
            if (s.isEmpty()) {
                send('I', o -> { });
                return true;
            }
            if (status == 'E' && !s.equals("ROLLBACK") && !s.equals("COMMIT")) {
                return error("25P02", false);
            }
            if (isTransactionControl(s)) {
                String tag = s.equals("COMMIT") && status == 'E' ? "ROLLBACK" : s;
                boolean outsideBlock = status == 'I' && !s.equals("BEGIN");
                Reply scripted = script.answer(this, s, params); // (a script may lose a COMMIT)
                if (scripted != null && scripted.vanish) {
                    socket.close();
                    return false;
                }
                if (scripted != null && scripted.silent) {
                    return silent();
                }
                status = s.equals("BEGIN") ? 'T' : 'I';
                if (outsideBlock) {
                    notice("WARNING", "25P01", "there is no transaction in progress");
                }
                send('C', o -> cstring(o, tag));
                return true;
            }
            Reply reply = described != null ? described : answer(s, params);
            if (reply.vanish) {
                socket.close();
                return false;
            }
            if (reply.silent) {
                return silent();
            }
            if (reply.errorCode != null) {
                return error(reply.errorCode, reply.fatal);
            }
            if ("BEGIN".equals(reply.tag)) {
                status = 'T';
            }
            if (reply.columns != null) {
                if (described == null) {
                    rowDescription(reply);
                }
                for (List<Object> row : reply.rows) {
                    send('D', o -> {
                        o.writeShort(row.size());
                        for (Object v : row) {
                            if (v == null) {
                                o.writeInt(-1);
                                continue;
                            }
                            byte[] text = String.valueOf(v).getBytes(StandardCharsets.UTF_8);
                            o.writeInt(text.length);
                            o.write(text);
                        }
                    });
                }
            }
            send('C', o -> cstring(o, reply.tag));
            return true;
        }

        private boolean error(String code, boolean fatal) throws IOException {
            send('E', o -> {
                o.write('S');
                cstring(o, fatal ? "FATAL" : "ERROR");
                o.write('V');
                cstring(o, fatal ? "FATAL" : "ERROR");
                o.write('C');
                cstring(o, code);
                o.write('M');
                cstring(o, "wire server: " + code);
                o.write(0);
            });
            if (fatal) {
                socket.close();
                return false;
            }
            if (status == 'T') {
                status = 'E';
            }
            skipping = true;
            return false;
        }

        private void notice(String severity, String code, String message) throws IOException {
            send('N', o -> {
                o.write('S');
                cstring(o, severity);
                o.write('V');
                cstring(o, severity);
                o.write('C');
                cstring(o, code);
                o.write('M');
                cstring(o, message);
                o.write(0);
            });
        }

        private void rowDescription(Reply reply) throws IOException {
            List<Object> first = reply.rows.isEmpty() ? null : reply.rows.get(0);
            send('T', o -> {
                o.writeShort(reply.columns.size());
                for (int i = 0; i < reply.columns.size(); i++) {
                    cstring(o, reply.columns.get(i));
                    o.writeInt(0);
                    o.writeShort(0);
                    boolean int8 = first != null && first.get(i) instanceof Long;
                    o.writeInt(int8 ? INT8 : TEXT);
                    o.writeShort(int8 ? 8 : -1);
                    o.writeInt(-1);
                    o.writeShort(0);
                }
            });
        }

        private void ready() throws IOException {
            char s = status;
            send('Z', o -> o.write(s));
        }

        synchronized void send(char type, Body body) throws IOException {
            java.io.ByteArrayOutputStream bytes = new java.io.ByteArrayOutputStream();
            body.write(new DataOutputStream(bytes));
            out.write(type);
            out.writeInt(bytes.size() + 4);
            bytes.writeTo(out);
            out.flush();
        }
    }

    private static String string(ByteBuffer b) {
        int start = b.position();
        while (b.get() != 0) {
            // (to the terminating zero)
        }
        return new String(b.array(), start, b.position() - start - 1, StandardCharsets.UTF_8);
    }
}
