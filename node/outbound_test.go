package node

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/http"
	"net/http/httptest"
	"net/mail"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// outboundSMTPServer is a small real SMTP server on loopback: EHLO/HELO advertising
// AUTH PLAIN and STARTTLS, AUTH PLAIN, MAIL, RCPT, DATA with dot-unstuffing, RSET, NOOP,
// QUIT. Without a TLS configuration it answers STARTTLS with 454, so a client that tries
// TLS on loopback fails.
type outboundSMTPServer struct {
	t          *testing.T
	ln         net.Listener
	user, pass string
	tls        *tls.Config

	mu    sync.Mutex
	conns int
	msgs  []outboundMail
	wg    sync.WaitGroup
}

// outboundMail is one message the server accepted.
type outboundMail struct {
	from     string
	to       []string
	data     []byte
	authUser string
	overTLS  bool
}

func startOutboundSMTP(t *testing.T, user, pass string, tlsCfg *tls.Config) *outboundSMTPServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &outboundSMTPServer{t: t, ln: ln, user: user, pass: pass, tls: tlsCfg}
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

func (s *outboundSMTPServer) addr() string { return s.ln.Addr().String() }

func (s *outboundSMTPServer) messages() []outboundMail {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]outboundMail(nil), s.msgs...)
}

func (s *outboundSMTPServer) connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

func (s *outboundSMTPServer) serve(conn net.Conn) {
	defer func() { conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(conn)
	w := bufio.NewWriter(conn)
	reply := func(lines ...string) {
		for _, l := range lines {
			w.WriteString(l + "\r\n")
		}
		w.Flush()
	}
	readLine := func() (string, bool) {
		l, err := r.ReadString('\n')
		if err != nil {
			return "", false
		}
		return strings.TrimRight(l, "\r\n"), true
	}
	var (
		overTLS, authed bool
		authUser, from  string
		rcpts           []string
	)
	checkPlain := func(b64 string) {
		raw, err := base64.StdEncoding.DecodeString(b64)
		parts := strings.Split(string(raw), "\x00")
		if err != nil || len(parts) != 3 {
			reply("501 5.5.2 malformed AUTH PLAIN")
			return
		}
		if parts[1] != s.user || parts[2] != s.pass {
			// Echo the credentials, as careless servers do: the client must not pass them on.
			reply("535 5.7.8 authentication failed for " + parts[1] + " with password " + parts[2])
			return
		}
		authed, authUser = true, parts[1]
		reply("235 2.7.0 authentication succeeded")
	}
	reply("220 mx.test ESMTP ready")
	for {
		line, ok := readLine()
		if !ok {
			return
		}
		verb, arg, _ := strings.Cut(line, " ")
		switch strings.ToUpper(verb) {
		case "EHLO":
			lines := []string{"250-mx.test hello " + arg, "250-8BITMIME", "250-AUTH PLAIN"}
			if !overTLS {
				lines = append(lines, "250-STARTTLS")
			}
			reply(append(lines, "250 SIZE 1000000")...)
		case "HELO":
			reply("250 mx.test")
		case "STARTTLS":
			if s.tls == nil || overTLS {
				reply("454 4.7.0 TLS not available")
				continue
			}
			reply("220 2.0.0 go ahead")
			tc := tls.Server(conn, s.tls)
			if err := tc.Handshake(); err != nil {
				return
			}
			conn, overTLS = tc, true
			r, w = bufio.NewReader(conn), bufio.NewWriter(conn)
			authed, authUser, from, rcpts = false, "", "", nil
		case "AUTH":
			mech, initial, _ := strings.Cut(arg, " ")
			if !strings.EqualFold(mech, "PLAIN") {
				reply("504 5.5.4 mechanism not supported")
				continue
			}
			if initial == "" {
				reply("334 ")
				if initial, ok = readLine(); !ok {
					return
				}
			}
			checkPlain(initial)
		case "*":
			reply("501 5.0.0 authentication cancelled")
		case "MAIL":
			if s.user != "" && !authed {
				reply("530 5.7.0 authentication required")
				continue
			}
			if from = outboundPath(arg, "FROM:"); from == "" {
				reply("501 5.1.7 bad sender address syntax")
				continue
			}
			reply("250 2.1.0 ok")
		case "RCPT":
			to := outboundPath(arg, "TO:")
			if to == "" || from == "" {
				reply("503 5.5.1 need MAIL first, then a valid <address>")
				continue
			}
			rcpts = append(rcpts, to)
			reply("250 2.1.5 ok")
		case "DATA":
			if from == "" || len(rcpts) == 0 {
				reply("503 5.5.1 need MAIL and RCPT first")
				continue
			}
			reply("354 end data with <CR><LF>.<CR><LF>")
			var data bytes.Buffer
			for {
				l, ok := readLine()
				if !ok {
					return
				}
				if l == "." {
					break
				}
				data.WriteString(strings.TrimPrefix(l, ".") + "\r\n") // dot-unstuffing
			}
			s.mu.Lock()
			s.msgs = append(s.msgs, outboundMail{from: from, to: rcpts, data: data.Bytes(), authUser: authUser, overTLS: overTLS})
			s.mu.Unlock()
			from, rcpts = "", nil
			reply("250 2.0.0 queued")
		case "RSET":
			from, rcpts = "", nil
			reply("250 2.0.0 ok")
		case "NOOP":
			reply("250 2.0.0 ok")
		case "QUIT":
			reply("221 2.0.0 bye")
			return
		default:
			reply("500 5.5.2 unknown command")
		}
	}
}

// outboundPath returns the address of "FROM:<a@b> BODY=8BITMIME" (prefix "FROM:"), or "".
func outboundPath(arg, prefix string) string {
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

// decodedMail is a received message with its headers and body decoded.
type decodedMail struct {
	header  mail.Header
	subject string
	body    string
}

func decodeOutboundMail(t *testing.T, raw []byte) decodedMail {
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
	return decodedMail{header: m.Header, subject: subject, body: string(body)}
}

func outboundTestLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestOutboundMailDelivered(t *testing.T) {
	srv := startOutboundSMTP(t, "coordinator", "s3cret-pw", nil)
	o := NewOutbound(OutboundConfig{
		SMTPAddr:     srv.addr(),
		SMTPFrom:     "gpunex coordinator <noreply@gpunex.example>",
		SMTPUsername: "coordinator",
		SMTPPassword: "s3cret-pw",
	}, outboundTestLogger())

	subject := "Candidature approuvée — niveau Enterprise"
	body := "Bonjour,\n\nVotre candidature est approuvée : niveau Enterprise, 8× H100.\n" +
		".une ligne qui commence par un point\n" +
		"a line with trailing spaces   \n" +
		strings.Repeat("long line ", 20) + "= end\n"
	err := o.Send(context.Background(), Notice{To: "Zoé <zoe@example.org>", Subject: subject, Body: body, Event: map[string]string{"kind": "approved"}})
	if err != nil {
		t.Fatalf("Send: %v", err)
	}

	msgs := srv.messages()
	if len(msgs) != 1 {
		t.Fatalf("server received %d messages, want 1", len(msgs))
	}
	got := msgs[0]
	if got.from != "noreply@gpunex.example" || len(got.to) != 1 || got.to[0] != "zoe@example.org" {
		t.Errorf("envelope from %q to %q, want noreply@gpunex.example to [zoe@example.org]", got.from, got.to)
	}
	if got.authUser != "coordinator" {
		t.Errorf("authenticated as %q, want coordinator", got.authUser)
	}
	if got.overTLS {
		t.Error("STARTTLS used on loopback")
	}
	m := decodeOutboundMail(t, got.data)
	if m.subject != subject {
		t.Errorf("Subject decodes to %q, want %q", m.subject, subject)
	}
	if raw := m.header.Get("Subject"); raw == subject || !strings.HasPrefix(raw, "=?utf-8?q?") {
		t.Errorf("non-ASCII Subject sent as %q, want RFC 2047 Q-encoding", raw)
	}
	from, err := m.header.AddressList("From")
	if err != nil || len(from) != 1 || from[0].Address != "noreply@gpunex.example" || from[0].Name != "gpunex coordinator" {
		t.Errorf("From = %q (%v)", m.header.Get("From"), err)
	}
	to, err := m.header.AddressList("To")
	if err != nil || len(to) != 1 || to[0].Address != "zoe@example.org" || to[0].Name != "Zoé" {
		t.Errorf("To = %q (%v)", m.header.Get("To"), err)
	}
	if ct := m.header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
		t.Errorf("Content-Type = %q", ct)
	}
	if v := m.header.Get("MIME-Version"); v != "1.0" {
		t.Errorf("MIME-Version = %q", v)
	}
	if id := m.header.Get("Message-ID"); !strings.HasPrefix(id, "<") || !strings.HasSuffix(id, "@gpunex.example>") {
		t.Errorf("Message-ID = %q", id)
	}
	if d, err := m.header.Date(); err != nil || time.Since(d).Abs() > time.Minute {
		t.Errorf("Date = %q (%v)", m.header.Get("Date"), err)
	}
	// The body goes out with CRLF line ends; compare modulo those.
	if want := strings.ReplaceAll(body, "\n", "\r\n"); m.body != want {
		t.Errorf("body decodes to\n%q\nwant\n%q", m.body, want)
	}
}

func TestOutboundMailWithoutAuth(t *testing.T) {
	srv := startOutboundSMTP(t, "", "", nil)
	o := NewOutbound(OutboundConfig{SMTPAddr: srv.addr(), SMTPFrom: "noreply@gpunex.example"}, outboundTestLogger())
	if err := o.Send(context.Background(), Notice{To: "ops@example.org", Subject: "Application received", Body: "ok"}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	msgs := srv.messages()
	if len(msgs) != 1 {
		t.Fatalf("server received %d messages, want 1", len(msgs))
	}
	m := decodeOutboundMail(t, msgs[0].data)
	if m.header.Get("Subject") != "Application received" {
		t.Errorf("ASCII Subject sent as %q, want it verbatim", m.header.Get("Subject"))
	}
	// SMTP ends the message with CRLF: the line break belongs to the message.
	if m.body != "ok\r\n" {
		t.Errorf("body = %q, want \"ok\\r\\n\"", m.body)
	}
}

func TestOutboundMailSTARTTLS(t *testing.T) {
	cert, pool := outboundTestCert(t)
	srv := startOutboundSMTP(t, "coordinator", "s3cret-pw", &tls.Config{Certificates: []tls.Certificate{cert}})
	o := NewOutbound(OutboundConfig{
		SMTPAddr: srv.addr(), SMTPFrom: "noreply@gpunex.example",
		SMTPUsername: "coordinator", SMTPPassword: "s3cret-pw",
	}, outboundTestLogger())
	// Behave as with a remote server: STARTTLS, verified against the test root.
	o.tlsOnLoopback = true
	o.tlsConfig = &tls.Config{RootCAs: pool}
	if err := o.Send(context.Background(), Notice{To: "zoe@example.org", Subject: "Approved", Body: "welcome"}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	msgs := srv.messages()
	if len(msgs) != 1 || !msgs[0].overTLS || msgs[0].authUser != "coordinator" {
		t.Fatalf("messages = %+v, want one sent over TLS by coordinator", msgs)
	}

	// An untrusted certificate stops the session before the password is sent.
	o.tlsConfig = &tls.Config{RootCAs: x509.NewCertPool()}
	err := o.Send(context.Background(), Notice{To: "zoe@example.org", Subject: "Approved", Body: "welcome"})
	if err == nil || !strings.Contains(err.Error(), "smtp: STARTTLS") {
		t.Fatalf("Send with an untrusted certificate: %v, want an smtp STARTTLS error", err)
	}
	if n := len(srv.messages()); n != 1 {
		t.Errorf("server holds %d messages, want still 1", n)
	}
}

// outboundTestCert makes a self-signed certificate for 127.0.0.1 and a pool trusting it.
func outboundTestCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "mx.test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

func TestOutboundMailWrongPassword(t *testing.T) {
	srv := startOutboundSMTP(t, "coordinator", "right-password", nil)
	const wrong = "hunter2-wrong-password"
	o := NewOutbound(OutboundConfig{
		SMTPAddr: srv.addr(), SMTPFrom: "noreply@gpunex.example",
		SMTPUsername: "coordinator", SMTPPassword: wrong,
	}, outboundTestLogger())
	err := o.Send(context.Background(), Notice{To: "zoe@example.org", Subject: "Approved", Body: "welcome"})
	if err == nil {
		t.Fatal("Send with a wrong password succeeded")
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "smtp: ") || !strings.Contains(msg, "535") {
		t.Errorf("error %q does not name the smtp channel and the server's 535", msg)
	}
	if strings.Contains(msg, wrong) {
		t.Errorf("error leaks the password: %q", msg)
	}
	blob := base64.StdEncoding.EncodeToString([]byte("\x00coordinator\x00" + wrong))
	if strings.Contains(msg, blob) {
		t.Errorf("error leaks the AUTH PLAIN blob: %q", msg)
	}
	for e := error(err); e != nil; e = errors.Unwrap(e) {
		if strings.Contains(e.Error(), wrong) {
			t.Errorf("a wrapped error leaks the password: %q", e)
		}
	}
	if n := len(srv.messages()); n != 0 {
		t.Errorf("server accepted %d messages without authentication", n)
	}
}

func TestOutboundMailHeaderInjection(t *testing.T) {
	srv := startOutboundSMTP(t, "", "", nil)
	o := NewOutbound(OutboundConfig{SMTPAddr: srv.addr(), SMTPFrom: "noreply@gpunex.example"}, outboundTestLogger())
	for _, n := range []Notice{
		{To: "zoe@example.org\r\nBcc: victim@example.net", Subject: "Approved", Body: "x"},
		{To: "zoe@example.org\nBcc: victim@example.net", Subject: "Approved", Body: "x"},
		{To: "zoe@example.org", Subject: "Approved\r\nBcc: victim@example.net", Body: "x"},
		{To: "zoe@example.org", Subject: "Approved\rBcc: victim@example.net", Body: "x"},
	} {
		err := o.Send(context.Background(), n)
		if !errors.Is(err, errHeaderInjection) || !strings.HasPrefix(err.Error(), "smtp: ") {
			t.Errorf("Send(To %q, Subject %q) = %v, want an smtp header-injection error", n.To, n.Subject, err)
		}
	}
	if c := srv.connections(); c != 0 {
		t.Errorf("server saw %d connections, want none: injection must be refused before dialling", c)
	}
}

func TestOutboundMailContextCancelled(t *testing.T) {
	// A server that accepts and never greets: the exchange must end with ctx.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		select {
		case c := <-accepted:
			c.Close()
		default:
		}
	})
	o := NewOutbound(OutboundConfig{SMTPAddr: ln.Addr().String(), SMTPFrom: "noreply@gpunex.example"}, outboundTestLogger())
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = o.Send(ctx, Notice{To: "zoe@example.org", Subject: "Approved", Body: "x"})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "smtp: ") {
		t.Fatalf("Send against a silent server = %v, want smtp: context deadline exceeded", err)
	}
}

// outboundWebhook is an httptest server answering with the given statuses in turn (the
// last one repeats) and recording each request.
type outboundWebhook struct {
	*httptest.Server
	mu       sync.Mutex
	statuses []int
	reqs     []outboundWebhookReq
}

type outboundWebhookReq struct {
	header http.Header
	body   []byte
	status int
}

func startOutboundWebhook(t *testing.T, statuses ...int) *outboundWebhook {
	t.Helper()
	h := &outboundWebhook{statuses: statuses}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		status := h.statuses[min(len(h.reqs), len(h.statuses)-1)]
		h.reqs = append(h.reqs, outboundWebhookReq{header: r.Header.Clone(), body: body, status: status})
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

func (h *outboundWebhook) requests() []outboundWebhookReq {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]outboundWebhookReq(nil), h.reqs...)
}

func (h *outboundWebhook) delivered() int {
	n := 0
	for _, r := range h.requests() {
		if r.status/100 == 2 {
			n++
		}
	}
	return n
}

func TestOutboundWebhookSignedJSON(t *testing.T) {
	hook := startOutboundWebhook(t, http.StatusNoContent)
	const secret = "webhook-shared-secret"
	o := NewOutbound(OutboundConfig{WebhookURL: hook.URL + "/hooks/gpunex?token=abc", WebhookSecret: secret}, outboundTestLogger())
	type decision struct {
		Application string `json:"application"`
		Tier        string `json:"tier"`
		GPUs        int    `json:"gpus"`
	}
	n := Notice{To: "zoe@example.org", Subject: "Candidature approuvée — niveau Enterprise", Body: "ignored by the webhook",
		Event: decision{Application: "app-42", Tier: "enterprise", GPUs: 8}}
	if err := o.Send(context.Background(), n); err != nil {
		t.Fatalf("Send: %v", err)
	}
	reqs := hook.requests()
	if len(reqs) != 1 {
		t.Fatalf("webhook got %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(r.body)
	want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	if got := r.header.Get("X-Gpunex-Signature"); !hmac.Equal([]byte(got), []byte(want)) {
		t.Errorf("X-Gpunex-Signature = %q, want %q", got, want)
	}
	var got struct {
		Event   decision `json:"event"`
		Subject string   `json:"subject"`
		To      string   `json:"to"`
	}
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("body %s: %v", r.body, err)
	}
	if got.Event != n.Event || got.Subject != n.Subject || got.To != n.To {
		t.Errorf("body = %s, want event %+v, subject %q, to %q", r.body, n.Event, n.Subject, n.To)
	}
}

func TestOutboundWebhookUnsigned(t *testing.T) {
	hook := startOutboundWebhook(t, http.StatusOK)
	o := NewOutbound(OutboundConfig{WebhookURL: hook.URL}, outboundTestLogger())
	if err := o.Send(context.Background(), Notice{Subject: "s", Event: 1}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	reqs := hook.requests()
	if len(reqs) != 1 {
		t.Fatalf("webhook got %d requests, want 1", len(reqs))
	}
	if sig, ok := reqs[0].header["X-Gpunex-Signature"]; ok {
		t.Errorf("unsigned webhook sent X-Gpunex-Signature %q", sig)
	}
}

func TestOutboundWebhookRetries5xx(t *testing.T) {
	hook := startOutboundWebhook(t, http.StatusInternalServerError, http.StatusOK)
	o := NewOutbound(OutboundConfig{WebhookURL: hook.URL, WebhookSecret: "k"}, outboundTestLogger())
	if err := o.Send(context.Background(), Notice{Subject: "s", Event: "approved"}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	reqs := hook.requests()
	if len(reqs) != 2 || hook.delivered() != 1 {
		t.Fatalf("webhook got %d requests, %d delivered; want 2 and 1", len(reqs), hook.delivered())
	}
	if !bytes.Equal(reqs[0].body, reqs[1].body) || reqs[0].header.Get("X-Gpunex-Signature") != reqs[1].header.Get("X-Gpunex-Signature") {
		t.Error("the retry differs from the first attempt")
	}
}

func TestOutboundWebhookRetriesNetworkError(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close() // drop the connection without an answer
			}
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	o := NewOutbound(OutboundConfig{WebhookURL: srv.URL}, outboundTestLogger())
	if err := o.Send(context.Background(), Notice{Subject: "s"}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("webhook got %d requests, want 2", n)
	}
}

func TestOutboundWebhook4xxNotRetried(t *testing.T) {
	hook := startOutboundWebhook(t, http.StatusBadRequest, http.StatusOK)
	o := NewOutbound(OutboundConfig{WebhookURL: hook.URL + "/hook?token=do-not-show"}, outboundTestLogger())
	err := o.Send(context.Background(), Notice{Subject: "s"})
	if err == nil {
		t.Fatal("Send succeeded on a 400")
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "webhook: ") || !strings.Contains(msg, "400 Bad Request") {
		t.Errorf("error %q does not name the webhook channel and the 400 status", msg)
	}
	if strings.Contains(err.Error(), "do-not-show") {
		t.Errorf("error shows the URL's query: %q", err)
	}
	if n := len(hook.requests()); n != 1 {
		t.Errorf("webhook got %d requests, want 1: a 4xx must not be retried", n)
	}
}

func TestOutboundWebhookGivesUpAfterThreeAttempts(t *testing.T) {
	hook := startOutboundWebhook(t, http.StatusBadGateway)
	o := NewOutbound(OutboundConfig{WebhookURL: hook.URL}, outboundTestLogger())
	o.backoff = []time.Duration{time.Millisecond} // the schedule itself is not under test here
	err := o.Send(context.Background(), Notice{Subject: "s"})
	if err == nil || !strings.Contains(err.Error(), "502 Bad Gateway") {
		t.Fatalf("Send = %v, want an error naming 502 Bad Gateway", err)
	}
	if n := len(hook.requests()); n != 3 {
		t.Errorf("webhook got %d requests, want 3", n)
	}
}

func TestOutboundWebhookStopsWithContext(t *testing.T) {
	hook := startOutboundWebhook(t, http.StatusServiceUnavailable)
	o := NewOutbound(OutboundConfig{WebhookURL: hook.URL}, outboundTestLogger())
	o.backoff = []time.Duration{time.Hour}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := o.Send(ctx, Notice{Subject: "s"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send = %v, want context deadline exceeded during the backoff", err)
	}
	if n := len(hook.requests()); n != 1 {
		t.Errorf("webhook got %d requests, want 1", n)
	}
}

func TestOutboundOneChannelFails(t *testing.T) {
	t.Run("smtp", func(t *testing.T) {
		srv := startOutboundSMTP(t, "coordinator", "right", nil)
		hook := startOutboundWebhook(t, http.StatusOK)
		o := NewOutbound(OutboundConfig{
			SMTPAddr: srv.addr(), SMTPFrom: "noreply@gpunex.example", SMTPUsername: "coordinator", SMTPPassword: "wrong",
			WebhookURL: hook.URL,
		}, outboundTestLogger())
		err := o.Send(context.Background(), Notice{To: "zoe@example.org", Subject: "s", Body: "b", Event: "approved"})
		if err == nil || !strings.HasPrefix(err.Error(), "smtp: ") || strings.Contains(err.Error(), "webhook") {
			t.Fatalf("Send = %v, want an error naming only smtp", err)
		}
		if hook.delivered() != 1 {
			t.Errorf("webhook delivered %d times, want 1", hook.delivered())
		}
	})
	t.Run("webhook", func(t *testing.T) {
		srv := startOutboundSMTP(t, "", "", nil)
		hook := startOutboundWebhook(t, http.StatusNotFound)
		o := NewOutbound(OutboundConfig{SMTPAddr: srv.addr(), SMTPFrom: "noreply@gpunex.example", WebhookURL: hook.URL}, outboundTestLogger())
		err := o.Send(context.Background(), Notice{To: "zoe@example.org", Subject: "s", Body: "b", Event: "approved"})
		if err == nil || !strings.HasPrefix(err.Error(), "webhook: ") || strings.Contains(err.Error(), "smtp") {
			t.Fatalf("Send = %v, want an error naming only webhook", err)
		}
		if n := len(srv.messages()); n != 1 {
			t.Errorf("e-mail delivered %d times, want 1", n)
		}
	})
}

func TestOutboundNoRecipientSkipsMail(t *testing.T) {
	srv := startOutboundSMTP(t, "", "", nil)
	hook := startOutboundWebhook(t, http.StatusOK)
	o := NewOutbound(OutboundConfig{SMTPAddr: srv.addr(), SMTPFrom: "noreply@gpunex.example", WebhookURL: hook.URL}, outboundTestLogger())
	if err := o.Send(context.Background(), Notice{Subject: "s", Event: "approved"}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if c := srv.connections(); c != 0 {
		t.Errorf("SMTP server saw %d connections for a notice without To", c)
	}
	if hook.delivered() != 1 {
		t.Errorf("webhook delivered %d times, want 1", hook.delivered())
	}
}
