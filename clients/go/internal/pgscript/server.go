// Package pgscript is a scripted PostgreSQL server on a loopback socket, for tests that run real
// pgx against it (the wire protocol through pgproto3; no PostgreSQL). It answers the
// transaction statements itself (BEGIN, COMMIT, ROLLBACK, savepoints, LISTEN, the empty
// statement), and every other statement by a handler registered for its SQL's prefix (which may
// open a transaction block, as a BEGIN with a leading comment does); it
// records every message it receives, and can fail the next executions of a statement, close
// the connection at COMMIT (unanswered), stop answering a connection at a statement (a shard
// that hangs), send NOTIFY to the sessions that LISTEN, and end every session as a server
// shutting down does (FATAL 57P01). Named statements live per session, as on a server (Parse
// of a name in use is 42P05, Bind of an unknown one 26000, Close of one drops it).
//
// Invariants: a session's messages are answered in order, in the result formats the client
// asked for (int4, int8 and text in binary, everything in text otherwise); after an error in
// the extended protocol every message up to Sync is ignored; a failed statement in a
// transaction block leaves it failed (25P02) until ROLLBACK, and its COMMIT answers ROLLBACK.
package pgscript

import (
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgproto3/v2"
)

// Type OIDs the server encodes.
const (
	Int4 uint32 = 23
	Int8 uint32 = 20
	Text uint32 = 25
)

// Column is a result column.
type Column struct {
	Name string
	Type uint32
}

// Result is what a statement answers: rows of text values (Null for SQL NULL) and a command
// tag, or the SQLSTATE of its error; Begins when the statement opened a transaction block.
type Result struct {
	Rows   [][]string
	Tag    string
	Code   string
	Begins bool
}

// Null as a value of Result.Rows is sent as SQL NULL (a NUL character, which no text value holds).
const Null = "\x00"

// Handler answers the statements whose SQL starts with its prefix.
type Handler struct {
	Params  []uint32 // the parameter types
	Columns []Column // the result columns (none: the statement returns no rows)
	Run     func(sql string, params []string) Result
}

// Server is the scripted server; its methods are safe for concurrent use.
type Server struct {
	ln net.Listener

	mu            sync.Mutex
	handlers      []registered
	failures      map[string][]string // prefix → the SQLSTATEs of its next executions
	stalls        []string            // prefixes: the next execution of each is never answered
	received      []string
	closeOnCommit bool
	sessions      []*session
	connections   int
}

type registered struct {
	prefix string
	h      Handler
}

// Start starts a server, stopped at the test's end.
func Start(t testing.TB) *Server {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{ln: ln, failures: map[string][]string{}}
	go s.accept()
	t.Cleanup(func() {
		ln.Close()
		s.TerminateAll(false)
	})
	return s
}

// DSN is the libpq key=value string of the server.
func (s *Server) DSN() string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=u dbname=d sslmode=disable connect_timeout=5", s.ln.Addr().(*net.TCPAddr).Port)
}

// Handle answers the statements whose SQL starts with prefix with h (the first registered
// prefix that matches wins).
func (s *Server) Handle(prefix string, h Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handlers = append(s.handlers, registered{prefix, h})
}

// FailNext makes the next executions of the statements starting with prefix fail, with codes
// in turn.
func (s *Server) FailNext(prefix string, codes ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures[prefix] = append(s.failures[prefix], codes...)
}

// StallNext makes the next execution of a statement starting with prefix go unanswered, and
// everything after it on its connection (a shard that stopped answering; the client gives up).
func (s *Server) StallNext(prefix string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stalls = append(s.stalls, prefix)
}

// Prepared counts the named statements the sessions hold (every session since the last
// TerminateAll, including those whose client has gone).
func (s *Server) Prepared() int {
	n := 0
	for _, p := range s.liveSessions() {
		p.stmtMu.Lock()
		n += len(p.named)
		p.stmtMu.Unlock()
	}
	return n
}

// CloseOnNextCommit closes the connection of the next COMMIT when it arrives, unanswered.
func (s *Server) CloseOnNextCommit() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeOnCommit = true
}

// Messages are the messages received since the last call, summarized ("Query BEGIN; ...",
// "Parse <sql>", "Parse[name] <sql>", "Bind", "Describe S", "Execute", "Sync").
func (s *Server) Messages() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.received
	s.received = nil
	return out
}

// Connections counts the sessions started (a CancelRequest is none).
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connections
}

// Notify sends a notification to every session that LISTENs on channel.
func (s *Server) Notify(channel, payload string) {
	for _, p := range s.liveSessions() {
		if p.listening(channel) {
			p.send(&pgproto3.NotificationResponse{PID: 1, Channel: channel, Payload: payload})
		}
	}
}

// Listening counts the sessions that LISTEN on channel.
func (s *Server) Listening(channel string) int {
	n := 0
	for _, p := range s.liveSessions() {
		if p.listening(channel) {
			n++
		}
	}
	return n
}

// TerminateAll ends every session: with FATAL 57P01 first (a server shutting down) or not.
func (s *Server) TerminateAll(fatal bool) {
	s.mu.Lock()
	sessions := s.sessions
	s.sessions = nil
	s.mu.Unlock()
	for _, p := range sessions {
		if fatal {
			p.send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"})
		}
		p.close()
	}
}

func (s *Server) liveSessions() []*session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*session(nil), s.sessions...)
}

func (s *Server) record(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.received = append(s.received, what)
}

func (s *Server) accept() {
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		p := &session{s: s, conn: conn, be: pgproto3.NewBackend(pgproto3.NewChunkReader(conn), conn), status: 'I',
			channels: map[string]bool{}, named: map[string]string{}}
		go p.serve()
	}
}

// undeclared is sql without a leading route-version comment ("/* id_gen.route_version=N */ "),
// which a shard reads for that statement alone; the handlers, failures and stalls match the rest.
func undeclared(sql string) string {
	if rest := strings.TrimPrefix(sql, "/* id_gen.route_version="); rest != sql {
		if i := strings.Index(rest, " */ "); i >= 0 {
			return rest[i+len(" */ "):]
		}
	}
	return sql
}

// handler is the handler of sql.
func (s *Server) handler(sql string) (Handler, bool) {
	sql = undeclared(sql)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.handlers {
		if strings.HasPrefix(sql, r.prefix) {
			return r.h, true
		}
	}
	return Handler{}, false
}

// takeFailure is the SQLSTATE queued for the next execution of sql ("" for none).
func (s *Server) takeFailure(sql string) string {
	sql = undeclared(sql)
	s.mu.Lock()
	defer s.mu.Unlock()
	for prefix, codes := range s.failures {
		if strings.HasPrefix(sql, prefix) && len(codes) > 0 {
			s.failures[prefix] = codes[1:]
			return codes[0]
		}
	}
	return ""
}

// takeStall reports whether the execution of sql is to stall (and forgets it then).
func (s *Server) takeStall(sql string) bool {
	sql = undeclared(sql)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, prefix := range s.stalls {
		if strings.HasPrefix(sql, prefix) {
			s.stalls = append(s.stalls[:i:i], s.stalls[i+1:]...)
			return true
		}
	}
	return false
}

func (s *Server) takeCloseOnCommit() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	closing := s.closeOnCommit
	s.closeOnCommit = false
	return closing
}

// session is one client connection.
type session struct {
	s        *Server
	conn     net.Conn
	be       *pgproto3.Backend
	writeMu  sync.Mutex // (NOTIFY and termination write from other goroutines)
	status   byte       // 'I', 'T' or 'E'
	chanMu   sync.Mutex
	channels map[string]bool
	stmtMu   sync.Mutex
	named    map[string]string // the named statements: name → SQL
	stalled  bool              // answers nothing any more
}

// portal is the unnamed statement or portal of the extended protocol, or a statement of a
// simple-protocol message (simple: text results after a row description).
type portal struct {
	simple        bool
	sql           string
	params        [][]byte
	paramFormats  []int16
	resultFormats []int16
}

func (p *session) send(msgs ...pgproto3.BackendMessage) {
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	var buf []byte
	for _, m := range msgs {
		buf = m.Encode(buf)
	}
	_, _ = p.conn.Write(buf)
}

func (p *session) close() {
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	p.conn.Close()
}

func (p *session) listening(channel string) bool {
	p.chanMu.Lock()
	defer p.chanMu.Unlock()
	return p.channels[channel]
}

func (p *session) serve() {
	defer p.conn.Close()
	if m, err := p.be.ReceiveStartupMessage(); err != nil {
		return
	} else if _, ok := m.(*pgproto3.StartupMessage); !ok {
		return // (pgconn's CancelRequest when it closes a broken connection)
	}
	p.s.mu.Lock()
	p.s.sessions = append(p.s.sessions, p)
	p.s.connections++
	p.s.mu.Unlock()
	p.send(&pgproto3.AuthenticationOk{},
		&pgproto3.ParameterStatus{Name: "server_version", Value: "15.0"},
		&pgproto3.ParameterStatus{Name: "standard_conforming_strings", Value: "on"},
		&pgproto3.ParameterStatus{Name: "client_encoding", Value: "UTF8"},
		&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: 2},
		&pgproto3.ReadyForQuery{TxStatus: 'I'})
	var stmt, bound portal
	skipping := false // (after an error in the extended protocol: until Sync)
	for {
		msg, err := p.be.Receive()
		if err != nil {
			return
		}
		if p.stalled {
			continue // (received, never answered)
		}
		switch m := msg.(type) {
		case *pgproto3.Query:
			p.s.record("Query " + m.String)
			if !p.simpleQuery(m.String) {
				return
			}
		case *pgproto3.Parse:
			if m.Name != "" {
				p.s.record("Parse[" + m.Name + "] " + m.Query)
			} else {
				p.s.record("Parse " + m.Query)
			}
			if skipping {
				continue
			}
			if m.Name != "" {
				if !p.prepare(m.Name, m.Query) {
					skipping = true
					continue
				}
			}
			stmt = portal{sql: m.Query}
			p.send(&pgproto3.ParseComplete{})
		case *pgproto3.Describe:
			p.s.record("Describe " + string(m.ObjectType))
			if skipping {
				continue
			}
			if m.ObjectType == 'S' {
				sql := stmt.sql
				if m.Name != "" {
					sql = p.namedSQL(m.Name)
				}
				h, _ := p.s.handler(sql)
				p.send(&pgproto3.ParameterDescription{ParameterOIDs: append([]uint32{}, h.Params...)}, rowDescription(h, nil))
			} else {
				h, _ := p.s.handler(bound.sql)
				p.send(rowDescription(h, bound.resultFormats))
			}
		case *pgproto3.Bind:
			p.s.record("Bind")
			if skipping {
				continue
			}
			sql := stmt.sql
			if m.PreparedStatement != "" {
				if sql = p.namedSQL(m.PreparedStatement); sql == "" {
					p.send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "26000", Message: "prepared statement does not exist"})
					p.failBlock()
					skipping = true
					continue
				}
			}
			bound = portal{sql: sql, params: copyParams(m.Parameters), paramFormats: append([]int16(nil), m.ParameterFormatCodes...),
				resultFormats: append([]int16(nil), m.ResultFormatCodes...)}
			p.send(&pgproto3.BindComplete{})
		case *pgproto3.Close:
			p.s.record("Close " + string(m.ObjectType) + " " + m.Name)
			if skipping {
				continue
			}
			if m.ObjectType == 'S' {
				p.stmtMu.Lock()
				delete(p.named, m.Name) // (a name not there is no error)
				p.stmtMu.Unlock()
			}
			p.send(&pgproto3.CloseComplete{})
		case *pgproto3.Execute:
			p.s.record("Execute")
			if !skipping && p.s.takeStall(bound.sql) {
				p.stalled = true
				continue
			}
			if !skipping {
				skipping = !p.run(bound)
			}
		case *pgproto3.Sync:
			p.s.record("Sync")
			skipping = false
			p.send(&pgproto3.ReadyForQuery{TxStatus: p.status})
		case *pgproto3.Terminate:
			return
		}
	}
}

// prepare makes the named statement name (whatever the transaction's state, as a server does
// for Parse); false, after a 42P05 error, when the name is in use.
func (p *session) prepare(name, sql string) bool {
	p.stmtMu.Lock()
	_, inUse := p.named[name]
	if !inUse {
		p.named[name] = sql
	}
	p.stmtMu.Unlock()
	if inUse {
		p.send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "42P05", Message: "prepared statement already exists"})
		p.failBlock()
	}
	return !inUse
}

// namedSQL is the SQL of the named statement name, "" when there is none.
func (p *session) namedSQL(name string) string {
	p.stmtMu.Lock()
	defer p.stmtMu.Unlock()
	return p.named[name]
}

// failBlock marks a transaction block failed (after an error).
func (p *session) failBlock() {
	if p.status == 'T' {
		p.status = 'E'
	}
}

func copyParams(params [][]byte) [][]byte {
	out := make([][]byte, len(params))
	for i, b := range params {
		out[i] = append([]byte(nil), b...)
	}
	return out
}

// simpleQuery runs a simple-protocol message of one or more statements (split on "; ");
// false when the connection was closed.
func (p *session) simpleQuery(query string) bool {
	if strings.TrimSpace(query) == ";" || strings.TrimSpace(query) == "" {
		p.send(&pgproto3.EmptyQueryResponse{}, &pgproto3.ReadyForQuery{TxStatus: p.status})
		return true
	}
	for _, sql := range strings.Split(query, "; ") {
		if strings.EqualFold(sql, "COMMIT") && p.s.takeCloseOnCommit() {
			p.close()
			return false
		}
		if p.s.takeStall(sql) {
			p.stalled = true
			return true
		}
		if !p.run(portal{sql: sql, simple: true}) {
			break
		}
	}
	p.send(&pgproto3.ReadyForQuery{TxStatus: p.status})
	return true
}

// run runs one statement; false after an error.
func (p *session) run(b portal) bool {
	fail := func(code string) bool {
		p.send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: code, Message: "scripted " + code})
		p.failBlock()
		return false
	}
	complete := func(tag string) bool {
		p.send(&pgproto3.CommandComplete{CommandTag: []byte(tag)})
		return true
	}
	control := strings.ToUpper(b.sql) // (pgx's own Tx sends "begin", "commit", "rollback")
	if p.status == 'E' && !strings.HasPrefix(control, "ROLLBACK") && control != "COMMIT" {
		return fail("25P02")
	}
	switch word := strings.Fields(b.sql + " x")[0]; {
	case control == "BEGIN":
		p.status = 'T'
		return complete("BEGIN")
	case control == "COMMIT":
		tag := "COMMIT"
		if p.status == 'E' {
			tag = "ROLLBACK"
		}
		p.status = 'I'
		return complete(tag)
	case control == "ROLLBACK":
		p.status = 'I'
		return complete("ROLLBACK")
	case strings.HasPrefix(control, "ROLLBACK TO "):
		p.status = 'T'
		return complete("ROLLBACK")
	case word == "SAVEPOINT" || word == "RELEASE":
		return complete(word)
	case word == "LISTEN":
		p.chanMu.Lock()
		p.channels[strings.Fields(b.sql)[1]] = true
		p.chanMu.Unlock()
		return complete("LISTEN")
	}
	h, ok := p.s.handler(b.sql)
	switch code := p.s.takeFailure(b.sql); {
	case code != "":
		return fail(code)
	case !ok:
		return fail("42601")
	}
	params := make([]string, len(b.params))
	for i := range b.params {
		params[i] = decodeParam(h, b, i)
	}
	result := h.Run(b.sql, params)
	if result.Code != "" {
		return fail(result.Code)
	}
	if result.Begins {
		p.status = 'T'
	}
	formats := b.resultFormats
	if b.simple {
		formats = nil
		if len(h.Columns) > 0 {
			p.send(rowDescription(h, nil))
		}
	}
	for _, row := range result.Rows {
		values := make([][]byte, len(row))
		for i, v := range row {
			if v != Null {
				values[i] = encodeValue(h.Columns[i].Type, format(formats, i), v)
			}
		}
		p.send(&pgproto3.DataRow{Values: values})
	}
	tag := result.Tag
	if tag == "" {
		tag = "SELECT " + strconv.Itoa(len(result.Rows))
	}
	return complete(tag)
}

// format is the format code of value i of a list of format codes (none: text; one: all).
func format(codes []int16, i int) int16 {
	switch {
	case len(codes) == 0:
		return 0
	case len(codes) == 1:
		return codes[0]
	case i < len(codes):
		return codes[i]
	}
	return 0
}

func decodeParam(h Handler, b portal, i int) string {
	if format(b.paramFormats, i) == 0 || i >= len(h.Params) {
		return string(b.params[i])
	}
	switch h.Params[i] {
	case Int8:
		return strconv.FormatInt(int64(binary.BigEndian.Uint64(b.params[i])), 10)
	case Int4:
		return strconv.FormatInt(int64(int32(binary.BigEndian.Uint32(b.params[i]))), 10)
	}
	return string(b.params[i])
}

func encodeValue(typ uint32, format int16, v string) []byte {
	if format == 1 {
		switch typ {
		case Int8:
			n, _ := strconv.ParseInt(v, 10, 64)
			return binary.BigEndian.AppendUint64(nil, uint64(n))
		case Int4:
			n, _ := strconv.ParseInt(v, 10, 32)
			return binary.BigEndian.AppendUint32(nil, uint32(n))
		}
	}
	return []byte(v)
}

// rowDescription of a handler's columns (NoData when it returns no rows).
func rowDescription(h Handler, formats []int16) pgproto3.BackendMessage {
	if len(h.Columns) == 0 {
		return &pgproto3.NoData{}
	}
	fields := make([]pgproto3.FieldDescription, len(h.Columns))
	for i, c := range h.Columns {
		fields[i] = pgproto3.FieldDescription{Name: []byte(c.Name), DataTypeOID: c.Type, DataTypeSize: -1, TypeModifier: -1,
			Format: format(formats, i)}
	}
	return &pgproto3.RowDescription{Fields: fields}
}
