// Dsn: a libpq keyword/value connection string ("host=127.0.0.1 port=5432 user=postgres
// dbname=postgres"), as the other clients' conformance tools take it, turned into a pgjdbc URL
// (jdbc:postgresql://host:port/dbname) and properties (user, password, ...).
//
// Invariants: every keyword is understood or refused (IllegalArgumentException), never
// ignored; values may be single-quoted with backslash escapes, as libpq allows; TCP only.
package org.idgen.client.conformance;

import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
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
        String host = given.containsKey("hostaddr") ? given.remove("hostaddr") : given.getOrDefault("host", "localhost");
        given.remove("host");
        if (host.startsWith("/")) {
            throw new IllegalArgumentException("a unix socket (" + host + ") is not supported: give host=<address>");
        }
        String port = given.getOrDefault("port", "5432");
        given.remove("port");
        Integer.parseInt(port); // (a port is a number)
        String dbname = given.remove("dbname");
        if (dbname == null) {
            dbname = given.getOrDefault("user", System.getProperty("user.name")); // (libpq's default)
        }
        Properties properties = new Properties();
        for (Map.Entry<String, String> e : given.entrySet()) {
            String property = PROPERTIES.get(e.getKey());
            if (property == null) {
                throw new IllegalArgumentException("the connection keyword " + e.getKey() + " is not supported here");
            }
            properties.setProperty(property, e.getValue());
        }
        String hostPart = host.contains(":") ? "[" + host + "]" : host;
        String path = URLEncoder.encode(dbname, StandardCharsets.UTF_8).replace("+", "%20");
        return new Dsn("jdbc:postgresql://" + hostPart + ":" + port + "/" + path, properties);
    }
}
