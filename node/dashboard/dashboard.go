// Package dashboard serves a node's web dashboard on its local API listener: the pages and
// their assets, embedded in the binary, and the browser sessions that stand for the API
// token. The pages only call the node's JSON API (docs/api.md); this package decides who
// may, through a session cookie that a one-time login link opens.
//
// What it guards against (docs/dashboard.md): another web site driving the node from the
// user's browser (the cookie is SameSite=Strict, and every API request also needs the
// session's key in a header, which only this origin's script holds; requests naming another
// host are refused, which stops DNS rebinding), a program on another local port that gets
// the cookie (browsers do not keep cookies apart by port; the cookie alone opens nothing),
// script injection through what peers publish (a strict Content-Security-Policy: no inline
// script, nothing from outside the node; the pages write peer data as text), and a leaked
// link (it opens one session once, within five minutes).
package dashboard

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path"
	"strings"
	"sync"
	"time"
)

//go:embed assets
var assets embed.FS

const (
	// LinkTTL is how long a login link may wait to be opened.
	LinkTTL = 5 * time.Minute
	// SessionTTL is how long a browser session lasts: a provider opens the installer's link
	// once and follows its node for a month, across the node's restarts.
	SessionTTL = 30 * 24 * time.Hour
	// KeyHeader carries the session's key on every API request of the dashboard. The key
	// reaches the page once, in the fragment of the login redirect (never sent to a
	// server), and the page keeps it in its origin's storage.
	KeyHeader = "X-Session-Key"
	// maxSessions bounds the sessions kept: the oldest is dropped past it.
	maxSessions = 64
)

// CSP is the Content-Security-Policy of every page: scripts, styles, images and requests
// from the node alone, no inline script, no frames.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

type session struct {
	Key     string    `json:"key"`
	Expires time.Time `json:"expires"`
}

// Server holds the login links and sessions of one node's dashboard.
type Server struct {
	now    func() time.Time
	cookie string // per listener port: several nodes on one machine keep their own sessions
	// store is the file the sessions are kept in across restarts ("": memory only).
	store string

	mu       sync.Mutex
	links    map[string]time.Time // link code → expiry
	sessions map[string]session   // by the SHA-256 of the cookie's value
	tickets  map[string]ticket    // download ticket → what it opens
	// pageTickets and pages are the job pages asked for and opened (pages.go).
	pageTickets map[string]pageTicket
	pages       map[string]page // by the SHA-256 of the page cookie's value

	index []byte // the page holds no secret and no per-session data: the same bytes for all
	login *template.Template
	files fs.FS
}

// New returns the dashboard of the node whose API listens on addr (host:port). Its
// sessions are kept in the file store (mode 0600; "" keeps them in memory only), so that a
// restart of the node does not sign its browsers out.
func New(addr, store string) *Server {
	_, port, _ := net.SplitHostPort(addr)
	files, _ := fs.Sub(assets, "assets")
	s := &Server{
		now: time.Now, cookie: "gpunex_session_" + port, store: store,
		links: map[string]time.Time{}, sessions: map[string]session{}, tickets: map[string]ticket{},
		pageTickets: map[string]pageTicket{}, pages: map[string]page{},
		index: must(fs.ReadFile(files, "index.html")),
		login: template.Must(template.ParseFS(files, "login.html")),
		files: files,
	}
	if store != "" {
		if b, err := os.ReadFile(store); err == nil {
			json.Unmarshal(b, &s.sessions) // a damaged file signs the browsers out, no more
		}
		for id, sess := range s.sessions {
			if s.now().After(sess.Expires) || len(sess.Key) != 64 {
				delete(s.sessions, id)
			}
		}
	}
	return s
}

// cookieID is what the sessions are kept by: a hash of the cookie, so that the file does
// not hold the cookies themselves.
func cookieID(value string) string {
	h := sha256.Sum256([]byte(value))
	return hex.EncodeToString(h[:])
}

// save writes the sessions to the store; the caller holds mu.
func (s *Server) save() {
	if s.store == "" {
		return
	}
	b, err := json.Marshal(s.sessions)
	if err != nil {
		return
	}
	tmp := s.store + ".tmp"
	if os.WriteFile(tmp, b, 0o600) == nil {
		os.Rename(tmp, s.store)
	}
}

// dropExpired removes the entries of m past their expiry.
func dropExpired[V any](m map[string]V, now time.Time, expires func(V) time.Time) {
	for k, v := range m {
		if now.After(expires(v)) {
			delete(m, k)
		}
	}
}

// dropFirstExpiring removes the entry of m that expires first, to make room.
func dropFirstExpiring[V any](m map[string]V, expires func(V) time.Time) {
	var first string
	for k, v := range m {
		if first == "" || expires(v).Before(expires(m[first])) {
			first = k
		}
	}
	delete(m, first)
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// NewLink returns the path and query of a one-time login link ("/login?code=…"), good for
// LinkTTL. Only holders of the API token ask for one (gpunex dashboard).
func (s *Server) NewLink() string {
	code := randomHex(32)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	dropExpired(s.links, now, func(exp time.Time) time.Time { return exp })
	s.links[code] = now.Add(LinkTTL)
	return "/login?code=" + code
}

// takeLink spends a link code: true once, while it is valid.
func (s *Server) takeLink(code string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.links[code]
	delete(s.links, code)
	return ok && !s.now().After(exp)
}

// Downloads. A link the browser follows cannot carry the session's key in a header, and a
// page that fetches a large answer (a job's output) to save it holds all of it in memory.
// So the page asks for a one-time ticket (an API call, with its key) naming the API path to
// download, then follows /download/TICKET: the browser writes the answer to disk as it
// arrives. Following a ticket needs the session's cookie, from a loopback host name, within
// TicketTTL, once.

// TicketTTL is how long a download ticket may wait to be followed.
const TicketTTL = time.Minute

// maxTickets bounds the tickets waiting: past it, new ones are refused until some expire.
const maxTickets = 64

type ticket struct {
	path    string
	session string // the cookie hash of the session that asked
	expires time.Time
}

// NewTicket returns a one-time download path standing for the API path, for the session
// of the request r (which Authorize passed).
func (s *Server) NewTicket(r *http.Request, path string) (string, error) {
	c, err := r.Cookie(s.cookie)
	if err != nil {
		return "", errors.New("download tickets are for dashboard sessions")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	dropExpired(s.tickets, now, func(t ticket) time.Time { return t.expires })
	if len(s.tickets) >= maxTickets {
		return "", errors.New("too many downloads waiting: follow or let expire those asked for")
	}
	code := randomHex(32)
	s.tickets[code] = ticket{path: path, session: cookieID(c.Value), expires: now.Add(TicketTTL)}
	return "/download/" + code, nil
}

// TakeTicket spends a download ticket: the API path it stands for, when the request
// carries the live session that asked for it, by a loopback host name, in time.
func (s *Server) TakeTicket(r *http.Request, code string) (string, bool) {
	c, err := r.Cookie(s.cookie)
	if err != nil || !LoopbackHost(r.Host) {
		return "", false
	}
	if _, live := s.session(r); !live {
		return "", false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tickets[code]
	delete(s.tickets, code)
	if !ok || s.now().After(t.expires) || subtle.ConstantTimeCompare([]byte(t.session), []byte(cookieID(c.Value))) != 1 {
		return "", false
	}
	return t.path, true
}

func (s *Server) newSession() (id string, sess session) {
	id, sess = randomHex(32), session{Key: randomHex(32), Expires: s.now().Add(SessionTTL)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.sessions) >= maxSessions {
		dropFirstExpiring(s.sessions, func(v session) time.Time { return v.Expires })
	}
	s.sessions[cookieID(id)] = sess
	s.save()
	return id, sess
}

// session returns the request's live session, if its cookie names one.
func (s *Server) session(r *http.Request) (session, bool) {
	c, err := r.Cookie(s.cookie)
	if err != nil {
		return session{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id := cookieID(c.Value)
	sess, ok := s.sessions[id]
	if ok && s.now().After(sess.Expires) {
		delete(s.sessions, id)
		s.save()
		return session{}, false
	}
	return sess, ok
}

// Authorize says whether an API request comes from a dashboard session: a live session
// cookie, a request to this machine by a loopback name, and the session's key in the
// X-Session-Key header (the cookie alone is not enough: another program on this machine
// may have it). why explains a refusal of a request that carried the cookie.
func (s *Server) Authorize(r *http.Request) (ok bool, why string) {
	sess, live := s.session(r)
	switch {
	case !live:
		return false, ""
	case !LoopbackHost(r.Host):
		return false, "the dashboard answers only on a loopback address"
	case subtle.ConstantTimeCompare([]byte(r.Header.Get(KeyHeader)), []byte(sess.Key)) != 1:
		return false, "missing or wrong session key: open a new link (gpunex dashboard)"
	}
	return true, ""
}

// LoopbackHost says whether a Host header names this machine by a loopback address or
// "localhost": a page of another site whose name was made to resolve to 127.0.0.1 (DNS
// rebinding) names its own host.
func LoopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// SecurityHeaders are set on every answer of the listener: pages and API alike.
func SecurityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}

// Register adds the dashboard's routes: / and /ui/ (the pages, behind a session), /login
// (a link's code opens a session), /logout, and /ui/assets/ (script modules, among them
// those of tabs/, styles, messages).
func (s *Server) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
	})
	mux.HandleFunc("GET /login", s.serveLogin)
	mux.HandleFunc("POST /logout", s.serveLogout)
	mux.HandleFunc("GET /ui/{$}", s.serveIndex)
	mux.HandleFunc("GET /ui/assets/{file...}", s.serveAsset)
}

func (s *Server) serveLogin(w http.ResponseWriter, r *http.Request) {
	SecurityHeaders(w.Header())
	w.Header().Set("Cache-Control", "no-store")
	if !LoopbackHost(r.Host) {
		http.Error(w, "the dashboard answers only on a loopback address", http.StatusForbidden)
		return
	}
	code := r.URL.Query().Get("code")
	if code != "" && s.takeLink(code) {
		id, sess := s.newSession()
		http.SetCookie(w, &http.Cookie{Name: s.cookie, Value: id, Path: "/", HttpOnly: true,
			SameSite: http.SameSiteStrictMode, MaxAge: int(SessionTTL / time.Second)})
		http.Redirect(w, r, "/ui/#key="+sess.Key, http.StatusSeeOther)
		return
	}
	status := http.StatusOK
	if code != "" {
		status = http.StatusUnauthorized
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	s.login.Execute(w, map[string]bool{"Spent": code != ""})
}

func (s *Server) serveLogout(w http.ResponseWriter, r *http.Request) {
	SecurityHeaders(w.Header())
	if ok, why := s.Authorize(r); !ok {
		if why == "" {
			why = "no session"
		}
		http.Error(w, why, http.StatusForbidden)
		return
	}
	c, _ := r.Cookie(s.cookie)
	s.mu.Lock()
	delete(s.sessions, cookieID(c.Value))
	s.save()
	s.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: s.cookie, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

func (s *Server) serveIndex(w http.ResponseWriter, r *http.Request) {
	SecurityHeaders(w.Header())
	w.Header().Set("Cache-Control", "no-store")
	if _, live := s.session(r); !live || !LoopbackHost(r.Host) {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(s.index)
}

// must returns an embedded asset, which is there by construction.
func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

var contentTypes = map[string]string{
	".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
	".json": "application/json", ".svg": "image/svg+xml", ".png": "image/png",
}

// serveAsset serves an embedded asset by its path under assets/ (fs.ReadFile refuses a
// path that is not clean or leaves the folder). Scripts are ES modules, which browsers load
// only with a JavaScript content type.
func (s *Server) serveAsset(w http.ResponseWriter, r *http.Request) {
	SecurityHeaders(w.Header())
	name := r.PathValue("file")
	ct, known := contentTypes[path.Ext(name)]
	b, err := fs.ReadFile(s.files, name)
	if !known || err != nil || strings.HasSuffix(name, ".html") {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", ct)
	// Checked again at each load: the assets change with the binary, under the same names.
	w.Header().Set("Cache-Control", "no-cache")
	w.Write(b)
}

// Assets returns every embedded asset with its size, for the bundle-size check.
func Assets() (map[string]int, error) {
	sizes := map[string]int{}
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assets.ReadFile(p)
		sizes[strings.TrimPrefix(p, "assets/")] = len(b)
		return err
	})
	return sizes, err
}

// Messages returns the message catalogue: language → key → text.
func Messages() ([]byte, error) { return assets.ReadFile("assets/messages.json") }
