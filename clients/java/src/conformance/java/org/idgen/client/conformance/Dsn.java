// Dsn: a libpq keyword/value connection string ("host=127.0.0.1 port=5432 user=postgres
// dbname=postgres"), as the other clients' conformance tools take it, turned into a pgjdbc URL
// (jdbc:postgresql://host:port/dbname) and properties (user, password, ...). Several hosts
// ("host=h1,h2 port=p1,p2", as libpq: one port for all hosts or one per host, an empty entry
// the default) become jdbc:postgresql://h1:p1,h2:p2/dbname with hostRecheckSeconds=1, and
// target_session_attrs=read-write|any becomes targetServerType=primary|any.
//
// Invariants: every keyword is understood or refused (IllegalArgumentException), never
// ignored; values may be single-quoted with backslash escapes, as libpq allows; TCP only.
package org.idgen.client.conformance;

import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

final class Dsn {
    private static final Pattern PAIR =
            Pattern.compile("\\s*([a-z_]+)\\s*=\\s*(?:'((?:[^'\\\\]|\\\\.)*)'|(\\S*))");
    private static final Map<String, String> PROPERTIES = Map.of(
            "user", "user", "password", "password", "connect_timeout", "connectTimeout", "sslmode", "sslmode",
            "application_name", "ApplicationName");
    /** libpq's target_session_attrs values understood here, as pgjdbc's targetServerType. */
    private static final Map<String, String> TARGET_SERVER_TYPES = Map.of("read-write", "primary", "any", "any");

    final String url;
    final Properties properties;

    private Dsn(String url, Properties properties) {
        this.url = url;
        this.properties = properties;
    }

    static Dsn parse(String dsn) {
        Map<String, String> given = new LinkedHashMap<>();
        Matcher m = PAIR.matcher(dsn);
        int end = 0;
        while (end < dsn.length() && m.find(end) && m.start() == end) {
            String value = m.group(2) != null ? m.group(2).replaceAll("\\\\(.)", "$1") : m.group(3);
            given.put(m.group(1), value);
            end = m.end();
        }
        if (!dsn.substring(end).trim().isEmpty()) {
            throw new IllegalArgumentException("not a libpq connection string: " + dsn);
        }
        String hostList = given.containsKey("hostaddr") ? given.remove("hostaddr") : given.getOrDefault("host", "");
        given.remove("host");
        List<String> hosts = entries(hostList, "localhost");
        List<String> ports = entries(given.getOrDefault("port", ""), "5432");
        given.remove("port");
        if (ports.size() != 1 && ports.size() != hosts.size()) {
            throw new IllegalArgumentException("a connection string with " + hosts.size() + " hosts takes one port or "
                    + hosts.size() + " ports, not " + ports.size() + ": " + dsn);
        }
        StringBuilder hostPart = new StringBuilder();
        for (int i = 0; i < hosts.size(); i++) {
            String host = hosts.get(i);
            if (host.startsWith("/")) {
                throw new IllegalArgumentException("a unix socket (" + host + ") is not supported: give host=<address>");
            }
            String port = ports.get(ports.size() == 1 ? 0 : i);
            if (!port.matches("[0-9]{1,5}")) {
                throw new IllegalArgumentException("a port is a number, not " + port + ": " + dsn);
            }
            hostPart.append(i == 0 ? "" : ",").append(host.contains(":") ? "[" + host + "]" : host).append(':').append(port);
        }
        String dbname = given.remove("dbname");
        if (dbname == null) {
            dbname = given.getOrDefault("user", System.getProperty("user.name")); // (libpq's default)
        }
        Properties properties = new Properties();
        String sessionAttrs = given.remove("target_session_attrs");
        if (sessionAttrs != null) {
            String serverType = TARGET_SERVER_TYPES.get(sessionAttrs);
            if (serverType == null) {
                throw new IllegalArgumentException("target_session_attrs=" + sessionAttrs
                        + " is not supported here: give read-write or any");
            }
            properties.setProperty("targetServerType", serverType);
        }
        if (hosts.size() > 1) {
            properties.setProperty("hostRecheckSeconds", "1"); // (a host's state, e.g. standby, is re-checked after 1 s)
        }
        for (Map.Entry<String, String> e : given.entrySet()) {
            String property = PROPERTIES.get(e.getKey());
            if (property == null) {
                throw new IllegalArgumentException("the connection keyword " + e.getKey() + " is not supported here");
            }
            properties.setProperty(property, e.getValue());
        }
        String path = URLEncoder.encode(dbname, StandardCharsets.UTF_8).replace("+", "%20");
        return new Dsn("jdbc:postgresql://" + hostPart + "/" + path, properties);
    }

    /** The comma-separated entries of a libpq host or port list, an empty entry as fallback. */
    private static List<String> entries(String list, String fallback) {
        List<String> out = new ArrayList<>();
        for (String entry : list.split(",", -1)) {
            out.add(entry.trim().isEmpty() ? fallback : entry.trim());
        }
        return out;
    }
}
