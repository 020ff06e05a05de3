// Package notify sends notices by e-mail and signed webhook: a coordinator's decisions and
// reminders to applicants and reviewers, and a node's alerts to its operator.
package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/http"
	"net/mail"
	"net/smtp"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
)

// Limits of the outbound channels.
const (
	// smtpTimeout bounds one whole SMTP exchange when ctx has no earlier deadline.
	smtpTimeout = 30 * time.Second
	// webhookAttemptTimeout bounds one webhook POST, whatever ctx allows.
	webhookAttemptTimeout = 10 * time.Second
	// webhookAttempts is how many times a POST is tried on network errors and 5xx.
	webhookAttempts = 3
	// webhookSignatureHeader carries "sha256=<hex HMAC-SHA256 of the body>".
	webhookSignatureHeader = "X-Gpunex-Signature"
)

// errHeaderInjection is returned for a To, From or Subject holding CR or LF, which
// would let the caller's text add headers (Bcc: ...) to the message.
var errHeaderInjection = errors.New("CR or LF in a header field")

// Config says where the coordinator sends decision notices besides the signed
// notification pushed to the provider's node. Empty fields disable a channel.
type Config struct {
	SMTPAddr      string // host:port of an SMTP server (submission); "" disables e-mail
	SMTPFrom      string // envelope and header From address
	SMTPUsername  string // optional; PLAIN auth is used when set (net/smtp refuses PLAIN without TLS except on localhost)
	SMTPPassword  string // read from a 0600 file by the caller; never logged or put in errors
	WebhookURL    string // "" disables the webhook
	WebhookSecret string // optional; when set, each POST carries X-Gpunex-Signature: sha256=<hex HMAC-SHA256 of the body>
}

// Notice is one message to an applicant.
type Notice struct {
	To      string // e-mail address of the applicant ("" skips e-mail)
	Subject string
	Body    string // plain text
	Event   any    // marshalled as JSON for the webhook body: {"event": <Event>, "subject": ..., "to": ...}
}

// Notices sends notices by e-mail and webhook. It is safe for concurrent use.
type Notices struct {
	cfg    Config
	log    *slog.Logger
	clock  clock.Clock
	client *http.Client

	// backoff is the wait before the second, third... webhook attempt.
	backoff []time.Duration
	// tlsConfig, when set, replaces the STARTTLS configuration (tests: a private root).
	tlsConfig *tls.Config
	// tlsOnLoopback makes STARTTLS run on loopback too (tests).
	tlsOnLoopback bool
}

// New returns the notices of cfg, timing retries on clk (the system clock when nil).
// A nil log discards.
func New(cfg Config, log *slog.Logger, clk clock.Clock) *Notices {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if clk == nil {
		clk = clock.System()
	}
	return &Notices{
		cfg:   cfg,
		log:   log,
		clock: clk,
		client: &http.Client{
			// A webhook that redirects is misconfigured; following would turn the POST into a GET.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		backoff: []time.Duration{200 * time.Millisecond, 400 * time.Millisecond},
	}
}

// Send delivers n on every configured channel; it returns the joined errors of the
// channels that failed (errors.Join), each naming its channel ("smtp: ...", "webhook: ...").
func (o *Notices) Send(ctx context.Context, n Notice) error {
	var (
		wg                  sync.WaitGroup
		smtpErr, webhookErr error
	)
	if o.cfg.SMTPAddr != "" && n.To != "" {
		wg.Go(func() {
			if err := o.sendMail(ctx, n); err != nil {
				smtpErr = fmt.Errorf("smtp: %w", err)
				o.log.Warn("notice not e-mailed", "to", n.To, "subject", n.Subject, "err", smtpErr)
				return
			}
			o.log.Info("notice e-mailed", "to", n.To, "subject", n.Subject)
		})
	}
	if o.cfg.WebhookURL != "" {
		wg.Go(func() {
			if err := o.postWebhook(ctx, n); err != nil {
				webhookErr = fmt.Errorf("webhook: %w", err)
				o.log.Warn("notice not posted", "subject", n.Subject, "err", webhookErr)
				return
			}
			o.log.Info("notice posted", "subject", n.Subject)
		})
	}
	wg.Wait()
	return errors.Join(smtpErr, webhookErr)
}

// sendMail runs one SMTP session: EHLO, STARTTLS unless on loopback, AUTH PLAIN when a
// username is set, MAIL, RCPT, DATA, QUIT.
func (o *Notices) sendMail(ctx context.Context, n Notice) error {
	from, to, msg, err := o.buildMail(n)
	if err != nil {
		return err
	}
	host, _, err := net.SplitHostPort(o.cfg.SMTPAddr)
	if err != nil {
		return fmt.Errorf("SMTPAddr %q: %w (want host:port)", o.cfg.SMTPAddr, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, smtpTimeout)
		defer cancel()
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", o.cfg.SMTPAddr)
	if err != nil {
		return o.redact(err)
	}
	defer conn.Close()
	// The end of ctx (its deadline or a cancel) unblocks whatever read or write is in
	// progress; ctx.Err() is set by then, so the error below names it.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	err = o.smtpSession(conn, host, from, to, msg)
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%w: %v", ctx.Err(), o.redact(err))
	}
	return o.redact(err)
}

func (o *Notices) smtpSession(conn net.Conn, host, from, to string, msg []byte) error {
	loopback := false
	if ta, ok := conn.RemoteAddr().(*net.TCPAddr); ok && ta.IP.IsLoopback() {
		loopback = true
		if !o.tlsOnLoopback {
			// net/smtp allows PLAIN in the clear only to a server it calls localhost.
			host = "localhost"
		}
	}
	c, err := smtp.NewClient(conn, host)
	if err != nil {
		return fmt.Errorf("greeting: %w", err)
	}
	defer c.Close()
	if err := c.Hello("localhost"); err != nil {
		return fmt.Errorf("EHLO: %w", err)
	}
	if ok, _ := c.Extension("STARTTLS"); ok && (!loopback || o.tlsOnLoopback) {
		cfg := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
		if o.tlsConfig != nil {
			cfg = o.tlsConfig.Clone()
			if cfg.ServerName == "" {
				cfg.ServerName = host
			}
		}
		if err := c.StartTLS(cfg); err != nil {
			return fmt.Errorf("STARTTLS: %w", err)
		}
	} else if !loopback {
		o.log.Warn("SMTP server offers no STARTTLS: sending in the clear", "addr", o.cfg.SMTPAddr)
	}
	if o.cfg.SMTPUsername != "" {
		auth := smtp.PlainAuth("", o.cfg.SMTPUsername, o.cfg.SMTPPassword, host)
		if err := c.Auth(auth); err != nil {
			return fmt.Errorf("AUTH PLAIN as %q: %w (check SMTPUsername and the password file)", o.cfg.SMTPUsername, err)
		}
	}
	if err := c.Mail(from); err != nil {
		return fmt.Errorf("MAIL FROM: %w", err)
	}
	if err := c.Rcpt(to); err != nil {
		return fmt.Errorf("RCPT TO <%s>: %w", to, err)
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("DATA: %w", err)
	}
	if _, err := w.Write(msg); err != nil {
		return fmt.Errorf("DATA: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("DATA: %w", err)
	}
	if err := c.Quit(); err != nil {
		// The message was accepted at the end of DATA; a failed QUIT loses nothing.
		o.log.Debug("SMTP QUIT failed after delivery", "err", o.redact(err))
	}
	return nil
}

// buildMail checks the header fields and returns the envelope addresses and the
// message: headers, then the body in quoted-printable. Line ends are CRLF; dot-stuffing
// is left to net/smtp's DATA writer.
func (o *Notices) buildMail(n Notice) (from, to string, msg []byte, err error) {
	for name, v := range map[string]string{"From": o.cfg.SMTPFrom, "To": n.To, "Subject": n.Subject} {
		if strings.ContainsAny(v, "\r\n") {
			return "", "", nil, fmt.Errorf("%s header %q: %w", name, v, errHeaderInjection)
		}
	}
	if o.cfg.SMTPFrom == "" {
		return "", "", nil, errors.New("SMTPFrom is empty: set the sender address")
	}
	fromAddr, err := mail.ParseAddress(o.cfg.SMTPFrom)
	if err != nil {
		return "", "", nil, fmt.Errorf("From address %q: %w", o.cfg.SMTPFrom, err)
	}
	toAddr, err := mail.ParseAddress(n.To)
	if err != nil {
		return "", "", nil, fmt.Errorf("To address %q: %w", n.To, err)
	}
	domain := "gpunex.invalid"
	if i := strings.LastIndexByte(fromAddr.Address, '@'); i >= 0 {
		domain = fromAddr.Address[i+1:]
	}
	var id [16]byte
	_, _ = rand.Read(id[:])

	var b bytes.Buffer
	header := func(k, v string) { b.WriteString(k + ": " + v + "\r\n") }
	header("From", fromAddr.String())
	header("To", toAddr.String())
	header("Subject", mime.QEncoding.Encode("utf-8", n.Subject))
	header("Date", time.Now().Format(time.RFC1123Z))
	header("Message-ID", "<"+hex.EncodeToString(id[:])+"@"+domain+">")
	header("MIME-Version", "1.0")
	header("Content-Type", "text/plain; charset=utf-8")
	header("Content-Transfer-Encoding", "quoted-printable")
	b.WriteString("\r\n")
	qp := quotedprintable.NewWriter(&b)
	if _, err := qp.Write([]byte(n.Body)); err != nil {
		return "", "", nil, err
	}
	if err := qp.Close(); err != nil {
		return "", "", nil, err
	}
	// net/smtp's DATA writer ends the last line with CRLF when the body does not.
	return fromAddr.Address, toAddr.Address, b.Bytes(), nil
}

// redact removes the SMTP password, alone or inside an AUTH PLAIN blob, from err's text.
// A redacted error does not unwrap, so the original text cannot be reached.
func (o *Notices) redact(err error) error {
	pw := o.cfg.SMTPPassword
	if err == nil || pw == "" {
		return err
	}
	msg := err.Error()
	blob := base64.StdEncoding.EncodeToString([]byte("\x00" + o.cfg.SMTPUsername + "\x00" + pw))
	if !strings.Contains(msg, pw) && !strings.Contains(msg, blob) {
		return err
	}
	msg = strings.ReplaceAll(msg, blob, "[redacted]")
	msg = strings.ReplaceAll(msg, pw, "[redacted]")
	return errors.New(msg)
}

// webhookPayload is the JSON body of a webhook POST.
type webhookPayload struct {
	Event   any    `json:"event"`
	Subject string `json:"subject"`
	To      string `json:"to"`
}

// postWebhook POSTs n as JSON, retrying on network errors and 5xx, never on 4xx.
func (o *Notices) postWebhook(ctx context.Context, n Notice) error {
	u, err := url.Parse(o.cfg.WebhookURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("WebhookURL is not an http(s) URL: fix the configuration")
	}
	// The URL may hold a token in its query or user info: errors name only the rest.
	shown := (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()

	body, err := json.Marshal(webhookPayload{Event: n.Event, Subject: n.Subject, To: n.To})
	if err != nil {
		return fmt.Errorf("encoding event: %w", err)
	}
	var sig string
	if o.cfg.WebhookSecret != "" {
		mac := hmac.New(sha256.New, []byte(o.cfg.WebhookSecret))
		mac.Write(body)
		sig = "sha256=" + hex.EncodeToString(mac.Sum(nil))
	}

	var last error
	for attempt := 1; attempt <= webhookAttempts; attempt++ {
		if attempt > 1 {
			wait := o.backoff[min(attempt-2, len(o.backoff)-1)]
			select {
			case <-ctx.Done():
				return fmt.Errorf("POST %s: %w after %d attempt(s), last: %v", shown, ctx.Err(), attempt-1, last)
			case <-o.clock.After(wait):
			}
		}
		retry, err := o.postOnce(ctx, o.cfg.WebhookURL, shown, body, sig)
		if err == nil {
			return nil
		}
		last = err
		if !retry || ctx.Err() != nil {
			break
		}
		o.log.Debug("webhook attempt failed", "attempt", attempt, "err", err)
	}
	return last
}

// postOnce makes one POST. retry says whether the failure is worth another attempt.
func (o *Notices) postOnce(ctx context.Context, rawURL, shown string, body []byte, sig string) (retry bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, webhookAttemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return false, fmt.Errorf("POST %s: %v", shown, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "gpunex/"+api.Version)
	if sig != "" {
		req.Header.Set(webhookSignatureHeader, sig)
	}
	resp, err := o.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text repeats the full URL
		}
		return true, fmt.Errorf("POST %s: %w", shown, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return false, nil
	case resp.StatusCode >= 500:
		return true, fmt.Errorf("POST %s: server answered %s", shown, resp.Status)
	default:
		return false, fmt.Errorf("POST %s: server answered %s (not retried: fix the request or the receiver)", shown, resp.Status)
	}
}

// FromConfig returns the channels of a [*.notify] or [alerts] section, their secret files
// read now; section names the settings in errors ("coordinator.notify").
func FromConfig(c config.NotifyConfig, section string) (Config, error) {
	out := Config{SMTPAddr: c.SMTPAddr, SMTPFrom: c.SMTPFrom, SMTPUsername: c.SMTPUsername, WebhookURL: c.WebhookURL}
	var err error
	if out.SMTPPassword, err = ReadSecretFile(c.SMTPPasswordFile, section+".smtp_password_file"); err != nil {
		return out, err
	}
	out.WebhookSecret, err = ReadSecretFile(c.WebhookSecretFile, section+".webhook_secret_file")
	return out, err
}

// ReadSecretFile reads a secret from a file that only its owner may read ("" when path is).
func ReadSecretFile(path, setting string) (string, error) {
	if path == "" {
		return "", nil
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", setting, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s: %s is readable by others (mode %o); chmod 600 it", setting, path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", setting, err)
	}
	return strings.TrimSpace(string(b)), nil
}
