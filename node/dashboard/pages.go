package dashboard

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Job pages. A renter's running job may serve a web page on a declared port (a notebook, a
// model server's UI). The dashboard opens it in one click on an origin of its own,
// http://pPORT-JOB.localhost:APIPORT/, which browsers resolve to this machine without DNS:
//   - the job's page is not on the dashboard's origin, so its scripts can neither read the
//     dashboard's storage (the session key) nor call the node's API with it, and the
//     dashboard's host-only session cookie is never sent to it;
//   - it is served at its own root, as the job's server expects (a notebook's absolute
//     links, its cookies and websockets work unchanged);
//   - each job page has its own origin: one job's page cannot read another's.
//
// A browser reaches that origin through a ticket of the dashboard's session (the Open
// button asks for one with the session's key), followed once within TicketTTL at
// /.gpunex/open on the page's host, which gives the browser a cookie for that host alone.
// The cookie opens that job's port while the session that asked for it lives, for
// PageTTL at most.

// PageTTL bounds how long an opened job page stays open without a new click.
const PageTTL = 12 * time.Hour

// PageOpenPath is where a job page's host takes its ticket.
const PageOpenPath = "/.gpunex/open"

// maxPages bounds the open job pages kept: the oldest is dropped past it.
const maxPages = 256

// pageHost is a job page's host name: pPORT-JOB.localhost.
var pageHost = regexp.MustCompile(`^p([0-9]{1,5})-([0-9a-f]{16})\.localhost$`)

type pageTicket struct {
	job     string
	port    int
	session string // the cookie hash of the session that asked
	expires time.Time
}

type page struct {
	job     string
	port    int
	session string // the cookie hash of the dashboard session it came from
	expires time.Time
}

// PageHost says whether a request's Host names a job page, and which job and port.
func PageHost(hostport string) (job string, port int, ok bool) {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	m := pageHost.FindStringSubmatch(strings.ToLower(host))
	if m == nil {
		return "", 0, false
	}
	port, err = strconv.Atoi(m[1])
	if err != nil || port < 1 || port > 65535 {
		return "", 0, false
	}
	return m[2], port, true
}

// NewPageTicket returns the URL that opens the job's port in the browser of the session of
// r (which Authorize passed), on the API port the browser reached the dashboard by.
func (s *Server) NewPageTicket(r *http.Request, job string, port int) (string, error) {
	c, err := r.Cookie(s.cookie)
	if err != nil {
		return "", errors.New("job pages are opened from a dashboard session")
	}
	_, apiPort, err := net.SplitHostPort(r.Host)
	if err != nil {
		return "", fmt.Errorf("the dashboard's host %q has no port", r.Host)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	dropExpired(s.pageTickets, now, func(t pageTicket) time.Time { return t.expires })
	if len(s.pageTickets) >= maxTickets {
		return "", errors.New("too many job pages waiting to open: follow or let expire those asked for")
	}
	code := randomHex(32)
	s.pageTickets[code] = pageTicket{job: job, port: port, session: cookieID(c.Value), expires: now.Add(TicketTTL)}
	return fmt.Sprintf("http://p%d-%s.localhost:%s%s?ticket=%s", port, job, apiPort, PageOpenPath, code), nil
}

// pageCookie is the cookie of the job pages of this node (each on its own host).
func (s *Server) pageCookie() string { return strings.Replace(s.cookie, "session", "page", 1) }

// OpenPage spends a page ticket on the job page's host it was made for, and sets the
// browser's cookie for that host. It answers whether the ticket was good.
func (s *Server) OpenPage(w http.ResponseWriter, r *http.Request, job string, port int) bool {
	code := r.URL.Query().Get("ticket")
	s.mu.Lock()
	t, ok := s.pageTickets[code]
	delete(s.pageTickets, code)
	now := s.now()
	sess, live := s.sessions[t.session]
	if !ok || now.After(t.expires) || t.job != job || t.port != port || !live || now.After(sess.Expires) {
		s.mu.Unlock()
		return false
	}
	if len(s.pages) >= maxPages {
		dropFirstExpiring(s.pages, func(p page) time.Time { return p.expires })
	}
	id := randomHex(32)
	s.pages[cookieID(id)] = page{job: job, port: port, session: t.session, expires: now.Add(PageTTL)}
	s.mu.Unlock()
	// Strict: another site that links to the page does not bring the cookie along. The
	// answer is a page that refreshes to the job's root, a navigation of this very host,
	// which sends it.
	http.SetCookie(w, &http.Cookie{Name: s.pageCookie(), Value: id, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, MaxAge: int(PageTTL / time.Second)})
	return true
}

// PageAuthorized says whether a request on a job page's host carries the cookie of an
// open page of that very job and port, whose dashboard session still lives.
func (s *Server) PageAuthorized(r *http.Request, job string, port int) bool {
	c, err := r.Cookie(s.pageCookie())
	if err != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id := cookieID(c.Value)
	p, ok := s.pages[id]
	now := s.now()
	if ok && now.After(p.expires) {
		delete(s.pages, id)
		return false
	}
	sess, live := s.sessions[p.session]
	return ok && live && !now.After(sess.Expires) &&
		subtle.ConstantTimeCompare([]byte(p.job), []byte(job)) == 1 && p.port == port
}

// StripPageCookie removes this node's page cookie from a request passed on to the job:
// the job's own cookies go through, the node's does not.
func (s *Server) StripPageCookie(h http.Header) {
	name := s.pageCookie()
	var kept []string
	for _, line := range h.Values("Cookie") {
		var parts []string
		for _, c := range strings.Split(line, ";") {
			if n, _, _ := strings.Cut(strings.TrimSpace(c), "="); n != name {
				parts = append(parts, strings.TrimSpace(c))
			}
		}
		if len(parts) > 0 {
			kept = append(kept, strings.Join(parts, "; "))
		}
	}
	h.Del("Cookie")
	if len(kept) > 0 {
		h.Set("Cookie", strings.Join(kept, "; "))
	}
}
