package notify

import (
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
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpunex/gpunex/node/internal/noticetest"
)

func noticesTestLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestNoticesMailDelivered(t *testing.T) {
	srv := noticetest.StartSMTP(t, "coordinator", "s3cret-pw", nil)
	o := New(Config{
		SMTPAddr:     srv.Addr(),
		SMTPFrom:     "gpunex coordinator <noreply@gpunex.example>",
		SMTPUsername: "coordinator",
		SMTPPassword: "s3cret-pw",
	}, noticesTestLogger(), nil)

	subject := "Candidature approuvée — niveau Enterprise"
	body := "Bonjour,\n\nVotre candidature est approuvée : niveau Enterprise, 8× H100.\n" +
		".une ligne qui commence par un point\n" +
		"a line with trailing spaces   \n" +
		strings.Repeat("long line ", 20) + "= end\n"
	err := o.Send(context.Background(), Notice{To: "Zoé <zoe@example.org>", Subject: subject, Body: body, Event: map[string]string{"kind": "approved"}})
	if err != nil {
		t.Fatalf("Send: %v", err)
	}

	msgs := srv.Messages()
	if len(msgs) != 1 {
		t.Fatalf("server received %d messages, want 1", len(msgs))
	}
	got := msgs[0]
	if got.From != "noreply@gpunex.example" || len(got.To) != 1 || got.To[0] != "zoe@example.org" {
		t.Errorf("envelope from %q to %q, want noreply@gpunex.example to [zoe@example.org]", got.From, got.To)
	}
	if got.AuthUser != "coordinator" {
		t.Errorf("authenticated as %q, want coordinator", got.AuthUser)
	}
	if got.OverTLS {
		t.Error("STARTTLS used on loopback")
	}
	m := noticetest.DecodeMail(t, got.Data)
	if m.Subject != subject {
		t.Errorf("Subject decodes to %q, want %q", m.Subject, subject)
	}
	if raw := m.Header.Get("Subject"); raw == subject || !strings.HasPrefix(raw, "=?utf-8?q?") {
		t.Errorf("non-ASCII Subject sent as %q, want RFC 2047 Q-encoding", raw)
	}
	from, err := m.Header.AddressList("From")
	if err != nil || len(from) != 1 || from[0].Address != "noreply@gpunex.example" || from[0].Name != "gpunex coordinator" {
		t.Errorf("From = %q (%v)", m.Header.Get("From"), err)
	}
	to, err := m.Header.AddressList("To")
	if err != nil || len(to) != 1 || to[0].Address != "zoe@example.org" || to[0].Name != "Zoé" {
		t.Errorf("To = %q (%v)", m.Header.Get("To"), err)
	}
	if ct := m.Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
		t.Errorf("Content-Type = %q", ct)
	}
	if v := m.Header.Get("MIME-Version"); v != "1.0" {
		t.Errorf("MIME-Version = %q", v)
	}
	if id := m.Header.Get("Message-ID"); !strings.HasPrefix(id, "<") || !strings.HasSuffix(id, "@gpunex.example>") {
		t.Errorf("Message-ID = %q", id)
	}
	if d, err := m.Header.Date(); err != nil || time.Since(d).Abs() > time.Minute {
		t.Errorf("Date = %q (%v)", m.Header.Get("Date"), err)
	}
	// The body goes out with CRLF line ends; compare modulo those.
	if want := strings.ReplaceAll(body, "\n", "\r\n"); m.Body != want {
		t.Errorf("body decodes to\n%q\nwant\n%q", m.Body, want)
	}
}

func TestNoticesMailWithoutAuth(t *testing.T) {
	srv := noticetest.StartSMTP(t, "", "", nil)
	o := New(Config{SMTPAddr: srv.Addr(), SMTPFrom: "noreply@gpunex.example"}, noticesTestLogger(), nil)
	if err := o.Send(context.Background(), Notice{To: "ops@example.org", Subject: "Application received", Body: "ok"}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	msgs := srv.Messages()
	if len(msgs) != 1 {
		t.Fatalf("server received %d messages, want 1", len(msgs))
	}
	m := noticetest.DecodeMail(t, msgs[0].Data)
	if m.Header.Get("Subject") != "Application received" {
		t.Errorf("ASCII Subject sent as %q, want it verbatim", m.Header.Get("Subject"))
	}
	// SMTP ends the message with CRLF: the line break belongs to the message.
	if m.Body != "ok\r\n" {
		t.Errorf("body = %q, want \"ok\\r\\n\"", m.Body)
	}
}

func TestNoticesMailSTARTTLS(t *testing.T) {
	cert, pool := noticesTestCert(t)
	srv := noticetest.StartSMTP(t, "coordinator", "s3cret-pw", &tls.Config{Certificates: []tls.Certificate{cert}})
	o := New(Config{
		SMTPAddr: srv.Addr(), SMTPFrom: "noreply@gpunex.example",
		SMTPUsername: "coordinator", SMTPPassword: "s3cret-pw",
	}, noticesTestLogger(), nil)
	// Behave as with a remote server: STARTTLS, verified against the test root.
	o.tlsOnLoopback = true
	o.tlsConfig = &tls.Config{RootCAs: pool}
	if err := o.Send(context.Background(), Notice{To: "zoe@example.org", Subject: "Approved", Body: "welcome"}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	msgs := srv.Messages()
	if len(msgs) != 1 || !msgs[0].OverTLS || msgs[0].AuthUser != "coordinator" {
		t.Fatalf("messages = %+v, want one sent over TLS by coordinator", msgs)
	}

	// An untrusted certificate stops the session before the password is sent.
	o.tlsConfig = &tls.Config{RootCAs: x509.NewCertPool()}
	err := o.Send(context.Background(), Notice{To: "zoe@example.org", Subject: "Approved", Body: "welcome"})
	if err == nil || !strings.Contains(err.Error(), "smtp: STARTTLS") {
		t.Fatalf("Send with an untrusted certificate: %v, want an smtp STARTTLS error", err)
	}
	if n := len(srv.Messages()); n != 1 {
		t.Errorf("server holds %d messages, want still 1", n)
	}
}

// noticesTestCert makes a self-signed certificate for 127.0.0.1 and a pool trusting it.
func noticesTestCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
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

func TestNoticesMailWrongPassword(t *testing.T) {
	srv := noticetest.StartSMTP(t, "coordinator", "right-password", nil)
	const wrong = "hunter2-wrong-password"
	o := New(Config{
		SMTPAddr: srv.Addr(), SMTPFrom: "noreply@gpunex.example",
		SMTPUsername: "coordinator", SMTPPassword: wrong,
	}, noticesTestLogger(), nil)
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
	if n := len(srv.Messages()); n != 0 {
		t.Errorf("server accepted %d messages without authentication", n)
	}
}

func TestNoticesMailHeaderInjection(t *testing.T) {
	srv := noticetest.StartSMTP(t, "", "", nil)
	o := New(Config{SMTPAddr: srv.Addr(), SMTPFrom: "noreply@gpunex.example"}, noticesTestLogger(), nil)
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
	if c := srv.Connections(); c != 0 {
		t.Errorf("server saw %d connections, want none: injection must be refused before dialling", c)
	}
}

func TestNoticesMailContextCancelled(t *testing.T) {
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
	o := New(Config{SMTPAddr: ln.Addr().String(), SMTPFrom: "noreply@gpunex.example"}, noticesTestLogger(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = o.Send(ctx, Notice{To: "zoe@example.org", Subject: "Approved", Body: "x"})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "smtp: ") {
		t.Fatalf("Send against a silent server = %v, want smtp: context deadline exceeded", err)
	}
}

func TestNoticesWebhookSignedJSON(t *testing.T) {
	hook := noticetest.StartWebhook(t, http.StatusNoContent)
	const secret = "webhook-shared-secret"
	o := New(Config{WebhookURL: hook.URL + "/hooks/gpunex?token=abc", WebhookSecret: secret}, noticesTestLogger(), nil)
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
	reqs := hook.Requests()
	if len(reqs) != 1 {
		t.Fatalf("webhook got %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(r.Body)
	want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	if got := r.Header.Get("X-Gpunex-Signature"); !hmac.Equal([]byte(got), []byte(want)) {
		t.Errorf("X-Gpunex-Signature = %q, want %q", got, want)
	}
	var got struct {
		Event   decision `json:"event"`
		Subject string   `json:"subject"`
		To      string   `json:"to"`
	}
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("body %s: %v", r.Body, err)
	}
	if got.Event != n.Event || got.Subject != n.Subject || got.To != n.To {
		t.Errorf("body = %s, want event %+v, subject %q, to %q", r.Body, n.Event, n.Subject, n.To)
	}
}

func TestNoticesWebhookUnsigned(t *testing.T) {
	hook := noticetest.StartWebhook(t, http.StatusOK)
	o := New(Config{WebhookURL: hook.URL}, noticesTestLogger(), nil)
	if err := o.Send(context.Background(), Notice{Subject: "s", Event: 1}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	reqs := hook.Requests()
	if len(reqs) != 1 {
		t.Fatalf("webhook got %d requests, want 1", len(reqs))
	}
	if sig, ok := reqs[0].Header["X-Gpunex-Signature"]; ok {
		t.Errorf("unsigned webhook sent X-Gpunex-Signature %q", sig)
	}
}

func TestNoticesWebhookRetries5xx(t *testing.T) {
	hook := noticetest.StartWebhook(t, http.StatusInternalServerError, http.StatusOK)
	o := New(Config{WebhookURL: hook.URL, WebhookSecret: "k"}, noticesTestLogger(), nil)
	if err := o.Send(context.Background(), Notice{Subject: "s", Event: "approved"}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	reqs := hook.Requests()
	if len(reqs) != 2 || hook.Delivered() != 1 {
		t.Fatalf("webhook got %d requests, %d delivered; want 2 and 1", len(reqs), hook.Delivered())
	}
	if !bytes.Equal(reqs[0].Body, reqs[1].Body) || reqs[0].Header.Get("X-Gpunex-Signature") != reqs[1].Header.Get("X-Gpunex-Signature") {
		t.Error("the retry differs from the first attempt")
	}
}

func TestNoticesWebhookRetriesNetworkError(t *testing.T) {
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
	o := New(Config{WebhookURL: srv.URL}, noticesTestLogger(), nil)
	if err := o.Send(context.Background(), Notice{Subject: "s"}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("webhook got %d requests, want 2", n)
	}
}

func TestNoticesWebhook4xxNotRetried(t *testing.T) {
	hook := noticetest.StartWebhook(t, http.StatusBadRequest, http.StatusOK)
	o := New(Config{WebhookURL: hook.URL + "/hook?token=do-not-show"}, noticesTestLogger(), nil)
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
	if n := len(hook.Requests()); n != 1 {
		t.Errorf("webhook got %d requests, want 1: a 4xx must not be retried", n)
	}
}

func TestNoticesWebhookGivesUpAfterThreeAttempts(t *testing.T) {
	hook := noticetest.StartWebhook(t, http.StatusBadGateway)
	o := New(Config{WebhookURL: hook.URL}, noticesTestLogger(), nil)
	o.backoff = []time.Duration{time.Millisecond} // the schedule itself is not under test here
	err := o.Send(context.Background(), Notice{Subject: "s"})
	if err == nil || !strings.Contains(err.Error(), "502 Bad Gateway") {
		t.Fatalf("Send = %v, want an error naming 502 Bad Gateway", err)
	}
	if n := len(hook.Requests()); n != 3 {
		t.Errorf("webhook got %d requests, want 3", n)
	}
}

func TestNoticesWebhookStopsWithContext(t *testing.T) {
	hook := noticetest.StartWebhook(t, http.StatusServiceUnavailable)
	o := New(Config{WebhookURL: hook.URL}, noticesTestLogger(), nil)
	o.backoff = []time.Duration{time.Hour}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := o.Send(ctx, Notice{Subject: "s"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send = %v, want context deadline exceeded during the backoff", err)
	}
	if n := len(hook.Requests()); n != 1 {
		t.Errorf("webhook got %d requests, want 1", n)
	}
}

func TestNoticesOneChannelFails(t *testing.T) {
	t.Run("smtp", func(t *testing.T) {
		srv := noticetest.StartSMTP(t, "coordinator", "right", nil)
		hook := noticetest.StartWebhook(t, http.StatusOK)
		o := New(Config{
			SMTPAddr: srv.Addr(), SMTPFrom: "noreply@gpunex.example", SMTPUsername: "coordinator", SMTPPassword: "wrong",
			WebhookURL: hook.URL,
		}, noticesTestLogger(), nil)
		err := o.Send(context.Background(), Notice{To: "zoe@example.org", Subject: "s", Body: "b", Event: "approved"})
		if err == nil || !strings.HasPrefix(err.Error(), "smtp: ") || strings.Contains(err.Error(), "webhook") {
			t.Fatalf("Send = %v, want an error naming only smtp", err)
		}
		if hook.Delivered() != 1 {
			t.Errorf("webhook delivered %d times, want 1", hook.Delivered())
		}
	})
	t.Run("webhook", func(t *testing.T) {
		srv := noticetest.StartSMTP(t, "", "", nil)
		hook := noticetest.StartWebhook(t, http.StatusNotFound)
		o := New(Config{SMTPAddr: srv.Addr(), SMTPFrom: "noreply@gpunex.example", WebhookURL: hook.URL}, noticesTestLogger(), nil)
		err := o.Send(context.Background(), Notice{To: "zoe@example.org", Subject: "s", Body: "b", Event: "approved"})
		if err == nil || !strings.HasPrefix(err.Error(), "webhook: ") || strings.Contains(err.Error(), "smtp") {
			t.Fatalf("Send = %v, want an error naming only webhook", err)
		}
		if n := len(srv.Messages()); n != 1 {
			t.Errorf("e-mail delivered %d times, want 1", n)
		}
	})
}

func TestNoticesNoRecipientSkipsMail(t *testing.T) {
	srv := noticetest.StartSMTP(t, "", "", nil)
	hook := noticetest.StartWebhook(t, http.StatusOK)
	o := New(Config{SMTPAddr: srv.Addr(), SMTPFrom: "noreply@gpunex.example", WebhookURL: hook.URL}, noticesTestLogger(), nil)
	if err := o.Send(context.Background(), Notice{Subject: "s", Event: "approved"}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if c := srv.Connections(); c != 0 {
		t.Errorf("SMTP server saw %d connections for a notice without To", c)
	}
	if hook.Delivered() != 1 {
		t.Errorf("webhook delivered %d times, want 1", hook.Delivered())
	}
}
