package dashboard

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestJobPages: a job page's ticket opens that job's port once, on that page's host, for
// the session that asked; the cookie it gives opens only that job and port, and closes
// with the session (sign-out) or after PageTTL. The node's page cookie is not passed on to
// the job; the job's own cookies are.
func TestJobPages(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	s := New("127.0.0.1:8787", "")
	s.now = func() time.Time { return now }
	mux := http.NewServeMux()
	s.Register(mux)
	signIn := func() (*http.Cookie, string) {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest("GET", "http://127.0.0.1:8787"+s.NewLink(), nil))
		return w.Result().Cookies()[0], strings.TrimPrefix(w.Result().Header.Get("Location"), "/ui/#key=")
	}
	const job, other = "0123456789abcdef", "fedcba9876543210"
	ticket := func(session *http.Cookie, job string, port int) *url.URL {
		t.Helper()
		req := httptest.NewRequest("POST", "http://localhost:9999/v1/dashboard/open", nil) // reached through a forward on 9999
		req.AddCookie(session)
		raw, err := s.NewPageTicket(req, job, port)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(raw)
		return u
	}
	// open follows a ticket URL on the host given; it returns the page cookie set, if any.
	open := func(u *url.URL, host string) *http.Cookie {
		req := httptest.NewRequest("GET", u.String(), nil)
		req.Host = host
		gotJob, gotPort, ok := PageHost(host)
		if !ok {
			t.Fatalf("%s is not a job page's host", host)
		}
		w := httptest.NewRecorder()
		if !s.OpenPage(w, req, gotJob, gotPort) {
			return nil
		}
		return w.Result().Cookies()[0]
	}
	authorized := func(c *http.Cookie, job string, port int) bool {
		req := httptest.NewRequest("GET", "http://x/", nil)
		req.AddCookie(c)
		return s.PageAuthorized(req, job, port)
	}

	session, _ := signIn()
	u := ticket(session, job, 8000)
	if u.Host != "p8000-"+job+".localhost:9999" || u.Path != PageOpenPath {
		t.Fatalf("a job page's URL: %s (want the job's own host, on the port the dashboard was reached by)", u)
	}
	if c := open(u, "p8001-"+job+".localhost:9999"); c != nil {
		t.Fatal("a ticket for port 8000 opened port 8001")
	}
	u = ticket(session, job, 8000)
	if c := open(u, "p8000-"+other+".localhost:9999"); c != nil {
		t.Fatal("a ticket for one job opened another's page")
	}
	u = ticket(session, job, 8000)
	page := open(u, u.Host)
	if page == nil || page.SameSite != http.SameSiteStrictMode || !page.HttpOnly {
		t.Fatalf("the page cookie: %+v", page)
	}
	if open(u, u.Host) != nil {
		t.Fatal("a ticket opened a page twice")
	}
	if !authorized(page, job, 8000) || authorized(page, job, 8001) || authorized(page, other, 8000) {
		t.Fatal("the page cookie opens something other than its job's port")
	}
	late := ticket(session, job, 8000)
	now = now.Add(TicketTTL + time.Second)
	if open(late, late.Host) != nil {
		t.Fatalf("a ticket past its %s opened the page", TicketTTL)
	}

	// The job's own cookies pass; the node's page cookie does not.
	h := http.Header{"Cookie": {"_xsrf=abc; " + page.Name + "=" + page.Value + "; theme=dark"}}
	s.StripPageCookie(h)
	if got := h.Get("Cookie"); got != "_xsrf=abc; theme=dark" {
		t.Fatalf("the cookies passed on to the job: %q", got)
	}

	// Signing out of the dashboard closes its job pages.
	second, key := signIn()
	u = ticket(second, job, 8000)
	page2 := open(u, u.Host)
	req := httptest.NewRequest("POST", "http://127.0.0.1:8787/logout", nil)
	req.AddCookie(second)
	req.Header.Set(KeyHeader, key)
	mux.ServeHTTP(httptest.NewRecorder(), req)
	if authorized(page2, job, 8000) {
		t.Fatal("a job page stayed open after its session signed out")
	}
	if !authorized(page, job, 8000) {
		t.Fatal("another session's job page closed with it")
	}
	now = now.Add(PageTTL)
	if authorized(page, job, 8000) {
		t.Fatalf("a job page stayed open past %s", PageTTL)
	}
	if _, _, ok := PageHost("p8000-" + job + ".localhost.evil.example:9999"); ok {
		t.Fatal("another site's host taken for a job page")
	}
}
