// Package noticetest holds the test servers of the coordinator's notices: a small real SMTP
// server and a webhook endpoint, both on loopback, for the notices' unit tests and the
// multi-node tests.
package noticetest

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"io"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/http"
	"net/http/httptest"
	"net/mail"
	"strings"
	"sync"
	"testing"
	"time"
)

// SMTPServer is a small real SMTP server on loopback: EHLO/HELO advertising
// AUTH PLAIN and STARTTLS, AUTH PLAIN, MAIL, RCPT, DATA with dot-unstuffing, RSET, NOOP,
// QUIT. Without a TLS configuration it answers STARTTLS with 454, so a client that tries
// TLS on loopback fails.
type SMTPServer struct {
	t          testing.TB
	ln         net.Listener
	user, pass string
	tls        *tls.Config

	mu    sync.Mutex
	conns int
	msgs  []Mail
	wg    sync.WaitGroup
}

// Mail is one message the server accepted.
type Mail struct {
	From     string
	To       []string
	Data     []byte
	AuthUser string
	OverTLS  bool
}

// StartSMTP starts an SMTP server on loopback; user and pass, when set, are the AUTH PLAIN
// credentials it takes; tlsCfg, when set, enables STARTTLS. It stops with the test.
func StartSMTP(t testing.TB, user, pass string, tlsCfg *tls.Config) *SMTPServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &SMTPServer{t: t, ln: ln, user: user, pass: pass, tls: tlsCfg}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns++
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.wg.Wait()
	})
	return s
}

// Addr is the server's host:port.
func (s *SMTPServer) Addr() string { return s.ln.Addr().String() }

// Messages are the messages accepted so far.
func (s *SMTPServer) Messages() []Mail {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Mail(nil), s.msgs...)
}

// Connections counts the connections taken so far.
func (s *SMTPServer) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

// smtpSession is one client's SMTP session with the test server.
type smtpSession struct {
	s               *SMTPServer
	conn            net.Conn
	r               *bufio.Reader
	w               *bufio.Writer
	overTLS, authed bool
	authUser, from  string
	rcpts           []string
}

func (s *SMTPServer) serve(conn net.Conn) {
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	ss := &smtpSession{s: s, conn: conn, r: bufio.NewReader(conn), w: bufio.NewWriter(conn)}
	defer func() { ss.conn.Close() }()
	ss.reply("220 mx.test ESMTP ready")
	for {
		line, ok := ss.readLine()
		if !ok {
			return
		}
		verb, arg, _ := strings.Cut(line, " ")
		if !ss.command(strings.ToUpper(verb), arg) {
			return
		}
	}
}

func (ss *smtpSession) reply(lines ...string) {
	for _, l := range lines {
		ss.w.WriteString(l + "\r\n")
	}
	ss.w.Flush()
}

func (ss *smtpSession) readLine() (string, bool) {
	l, err := ss.r.ReadString('\n')
	if err != nil {
		return "", false
	}
	return strings.TrimRight(l, "\r\n"), true
}

// command answers one command; false ends the session.
func (ss *smtpSession) command(verb, arg string) bool {
	switch verb {
	case "EHLO":
		lines := []string{"250-mx.test hello " + arg, "250-8BITMIME", "250-AUTH PLAIN"}
		if !ss.overTLS {
			lines = append(lines, "250-STARTTLS")
		}
		ss.reply(append(lines, "250 SIZE 1000000")...)
	case "HELO":
		ss.reply("250 mx.test")
	case "STARTTLS":
		return ss.startTLS()
	case "AUTH":
		return ss.auth(arg)
	case "*":
		ss.reply("501 5.0.0 authentication cancelled")
	case "MAIL":
		if ss.s.user != "" && !ss.authed {
			ss.reply("530 5.7.0 authentication required")
			return true
		}
		if ss.from = smtpPath(arg, "FROM:"); ss.from == "" {
			ss.reply("501 5.1.7 bad sender address syntax")
			return true
		}
		ss.reply("250 2.1.0 ok")
	case "RCPT":
		to := smtpPath(arg, "TO:")
		if to == "" || ss.from == "" {
			ss.reply("503 5.5.1 need MAIL first, then a valid <address>")
			return true
		}
		ss.rcpts = append(ss.rcpts, to)
		ss.reply("250 2.1.5 ok")
	case "DATA":
		return ss.data()
	case "RSET":
		ss.from, ss.rcpts = "", nil
		ss.reply("250 2.0.0 ok")
	case "NOOP":
		ss.reply("250 2.0.0 ok")
	case "QUIT":
		ss.reply("221 2.0.0 bye")
		return false
	default:
		ss.reply("500 5.5.2 unknown command")
	}
	return true
}

func (ss *smtpSession) startTLS() bool {
	if ss.s.tls == nil || ss.overTLS {
		ss.reply("454 4.7.0 TLS not available")
		return true
	}
	ss.reply("220 2.0.0 go ahead")
	tc := tls.Server(ss.conn, ss.s.tls)
	if err := tc.Handshake(); err != nil {
		return false
	}
	ss.conn, ss.overTLS = tc, true
	ss.r, ss.w = bufio.NewReader(tc), bufio.NewWriter(tc)
	ss.authed, ss.authUser, ss.from, ss.rcpts = false, "", "", nil
	return true
}

func (ss *smtpSession) auth(arg string) bool {
	mech, initial, _ := strings.Cut(arg, " ")
	if !strings.EqualFold(mech, "PLAIN") {
		ss.reply("504 5.5.4 mechanism not supported")
		return true
	}
	if initial == "" {
		ss.reply("334 ")
		var ok bool
		if initial, ok = ss.readLine(); !ok {
			return false
		}
	}
	raw, err := base64.StdEncoding.DecodeString(initial)
	parts := strings.Split(string(raw), "\x00")
	if err != nil || len(parts) != 3 {
		ss.reply("501 5.5.2 malformed AUTH PLAIN")
		return true
	}
	if parts[1] != ss.s.user || parts[2] != ss.s.pass {
		// Echo the credentials, as careless servers do: the client must not pass them on.
		ss.reply("535 5.7.8 authentication failed for " + parts[1] + " with password " + parts[2])
		return true
	}
	ss.authed, ss.authUser = true, parts[1]
	ss.reply("235 2.7.0 authentication succeeded")
	return true
}

func (ss *smtpSession) data() bool {
	if ss.from == "" || len(ss.rcpts) == 0 {
		ss.reply("503 5.5.1 need MAIL and RCPT first")
		return true
	}
	ss.reply("354 end data with <CR><LF>.<CR><LF>")
	var data bytes.Buffer
	for {
		l, ok := ss.readLine()
		if !ok {
			return false
		}
		if l == "." {
			break
		}
		data.WriteString(strings.TrimPrefix(l, ".") + "\r\n") // dot-unstuffing
	}
	ss.s.mu.Lock()
	ss.s.msgs = append(ss.s.msgs, Mail{From: ss.from, To: ss.rcpts, Data: data.Bytes(), AuthUser: ss.authUser, OverTLS: ss.overTLS})
	ss.s.mu.Unlock()
	ss.from, ss.rcpts = "", nil
	ss.reply("250 2.0.0 queued")
	return true
}

// smtpPath returns the address of "FROM:<a@b> BODY=8BITMIME" (prefix "FROM:"), or "".
func smtpPath(arg, prefix string) string {
	if !strings.HasPrefix(strings.ToUpper(arg), prefix) {
		return ""
	}
	rest := arg[len(prefix):]
	i, j := strings.IndexByte(rest, '<'), strings.IndexByte(rest, '>')
	if i != 0 || j < i {
		return ""
	}
	return rest[i+1 : j]
}

// DecodedMail is a received message with its headers and body decoded.
type DecodedMail struct {
	Header  mail.Header
	Subject string
	Body    string
}

// DecodeMail parses a received message, failing the test when it breaks RFC 5322 or is not
// quoted-printable.
func DecodeMail(t testing.TB, raw []byte) DecodedMail {
	t.Helper()
	for i, l := range strings.Split(string(raw), "\r\n") {
		if len(l) > 998 {
			t.Errorf("line %d is %d octets long, over the RFC 5322 limit", i, len(l))
		}
	}
	m, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("message does not parse: %v\n%s", err, raw)
	}
	subject, err := new(mime.WordDecoder).DecodeHeader(m.Header.Get("Subject"))
	if err != nil {
		t.Fatalf("Subject %q does not decode: %v", m.Header.Get("Subject"), err)
	}
	if got := m.Header.Get("Content-Transfer-Encoding"); got != "quoted-printable" {
		t.Fatalf("Content-Transfer-Encoding = %q, want quoted-printable", got)
	}
	body, err := io.ReadAll(quotedprintable.NewReader(m.Body))
	if err != nil {
		t.Fatalf("body is not valid quoted-printable: %v", err)
	}
	return DecodedMail{Header: m.Header, Subject: subject, Body: string(body)}
}

// Webhook is an httptest server answering with the given statuses in turn (the
// last one repeats) and recording each request.
type Webhook struct {
	*httptest.Server
	mu       sync.Mutex
	statuses []int
	reqs     []WebhookRequest
}

// WebhookRequest is one request the webhook server received, and the status it answered.
type WebhookRequest struct {
	Header http.Header
	Body   []byte
	Status int
}

// StartWebhook starts the webhook server; it stops with the test.
func StartWebhook(t testing.TB, statuses ...int) *Webhook {
	t.Helper()
	h := &Webhook{statuses: statuses}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		status := h.statuses[min(len(h.reqs), len(h.statuses)-1)]
		h.reqs = append(h.reqs, WebhookRequest{Header: r.Header.Clone(), Body: body, Status: status})
		h.mu.Unlock()
		if r.Method != http.MethodPost {
			status = http.StatusMethodNotAllowed
		}
		w.WriteHeader(status)
		io.WriteString(w, http.StatusText(status))
	}))
	t.Cleanup(h.Close)
	return h
}

// Requests are the requests received so far.
func (h *Webhook) Requests() []WebhookRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]WebhookRequest(nil), h.reqs...)
}

// Delivered counts the requests answered with a 2xx status.
func (h *Webhook) Delivered() int {
	n := 0
	for _, r := range h.Requests() {
		if r.Status/100 == 2 {
			n++
		}
	}
	return n
}
