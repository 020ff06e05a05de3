package dashboard

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCatalogue: every message the pages use has an English and a French text, and the
// French differs from the English but for words that are the same in both languages.
func TestCatalogue(t *testing.T) {
	raw, err := Messages()
	if err != nil {
		t.Fatal(err)
	}
	var cat map[string]map[string]string
	if err := json.Unmarshal(raw, &cat); err != nil {
		t.Fatal(err)
	}
	same := []string{"version", "uuid", "cuda", "notifications", "message", "transaction", "date", "total", "commission",
		"contact", "id", "placement", "note", "fp32", "fp16", "verdict", "sort_perf", "perf", "gpu", "gpus_count", "net", "image", "maintenance",
		"iban", "bic", "set_in_config"}
	for key, en := range cat["en"] {
		fr := cat["fr"][key]
		switch {
		case strings.TrimSpace(en) == "" || strings.TrimSpace(fr) == "":
			t.Errorf("message %q: English %q, French %q", key, en, fr)
		case fr == en && !slices.Contains(same, key):
			t.Errorf("message %q is not translated: %q", key, fr)
		}
	}
	for key := range cat["fr"] {
		if _, ok := cat["en"][key]; !ok {
			t.Errorf("French message %q has no English text", key)
		}
	}
	// The keys the scripts name as literals (labels, buttons, titles, headings), in every
	// module.
	var js []byte
	err = fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".js") {
			return err
		}
		b, err := assets.ReadFile(p)
		js = append(js, b...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, re := range []string{`i18n: '([a-z0-9_-]+)'`, `\bt\('([a-z0-9_-]+)'`, `(?:field|card|button|okBox)\('([a-z0-9_]+)'`, `\['([a-z0-9_]+)', [^']`} {
		for _, m := range regexp.MustCompile(re).FindAllStringSubmatch(string(js), -1) {
			if !strings.HasSuffix(m[1], "_") { // a prefix: 'tab_' + name
				used[m[1]] = true
			}
		}
	}
	for _, m := range regexp.MustCompile(`table\(\[([^\]]*)\]`).FindAllStringSubmatch(string(js), -1) {
		for _, k := range regexp.MustCompile(`'([a-z0-9_]+)'`).FindAllStringSubmatch(m[1], -1) {
			used[k[1]] = true
		}
	}
	if len(used) < 100 {
		t.Fatalf("found only %d message keys in the scripts: the patterns are stale", len(used))
	}
	for k := range used {
		if _, ok := cat["en"][k]; !ok {
			t.Errorf("the scripts use message %q, which the catalogue lacks", k)
		}
	}
}

// TestBundleSize: everything the browser loads (the page, script, styles, messages) stays
// under 500 KB.
func TestBundleSize(t *testing.T) {
	sizes, err := Assets()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range sizes {
		total += n
	}
	t.Logf("dashboard assets: %d bytes in %d files", total, len(sizes))
	if total > 500_000 {
		t.Fatalf("the dashboard's assets weigh %d bytes, past the 500 KB budget: %v", total, sizes)
	}
}

// TestLinks: a login link opens one session, once, within LinkTTL; sessions expire; past
// maxSessions the oldest goes.
func TestLinks(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	s := New("127.0.0.1:8787", "")
	s.now = func() time.Time { return now }
	mux := http.NewServeMux()
	s.Register(mux)
	open := func(link string) *http.Response {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest("GET", "http://127.0.0.1:8787"+link, nil))
		return w.Result()
	}
	late := s.NewLink()
	now = now.Add(LinkTTL + time.Second)
	if r := open(late); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a link past its %s: %d", LinkTTL, r.StatusCode)
	}
	link := s.NewLink()
	r := open(link)
	if r.StatusCode != http.StatusSeeOther || len(r.Cookies()) != 1 || r.Cookies()[0].Name != "gpunex_session_8787" {
		t.Fatalf("a fresh link: %d %v", r.StatusCode, r.Cookies())
	}
	cookie := r.Cookies()[0]
	req := httptest.NewRequest("GET", "http://127.0.0.1:8787/v1/status", nil)
	req.AddCookie(cookie)
	req.Header.Set(KeyHeader, strings.TrimPrefix(r.Header.Get("Location"), "/ui/#key="))
	if ok, why := s.Authorize(req); !ok {
		t.Fatalf("the session is refused: %s", why)
	}
	now = now.Add(SessionTTL + time.Second)
	if ok, _ := s.Authorize(req); ok {
		t.Fatalf("a session past its %s is accepted", SessionTTL)
	}
	for range maxSessions + 5 {
		s.newSession()
	}
	if len(s.sessions) != maxSessions {
		t.Fatalf("%d sessions kept, at most %d", len(s.sessions), maxSessions)
	}
}

// TestSessionsSurviveRestart: a browser signed in stays signed in when the node restarts
// (its sessions are in a file only the node's user reads, which holds no cookie); signing
// out removes the session from the file too.
func TestSessionsSurviveRestart(t *testing.T) {
	store := filepath.Join(t.TempDir(), "dashboard-sessions.json")
	s := New("127.0.0.1:8787", store)
	mux := http.NewServeMux()
	s.Register(mux)
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest("GET", "http://127.0.0.1:8787"+s.NewLink(), nil))
	cookie, key := w.Result().Cookies()[0], strings.TrimPrefix(w.Result().Header.Get("Location"), "/ui/#key=")
	signedIn := func(s *Server) bool {
		req := httptest.NewRequest("GET", "http://127.0.0.1:8787/v1/status", nil)
		req.AddCookie(cookie)
		req.Header.Set(KeyHeader, key)
		ok, _ := s.Authorize(req)
		return ok
	}
	st, err := os.Stat(store)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the sessions' file: %v %v", st, err)
	}
	if b, _ := os.ReadFile(store); strings.Contains(string(b), cookie.Value) {
		t.Fatal("the sessions' file holds the cookie")
	}
	restarted := New("127.0.0.1:8787", store)
	if !signedIn(restarted) {
		t.Fatal("the session did not survive the restart")
	}
	mux = http.NewServeMux()
	restarted.Register(mux)
	req := httptest.NewRequest("POST", "http://127.0.0.1:8787/logout", nil)
	req.AddCookie(cookie)
	req.Header.Set(KeyHeader, key)
	mux.ServeHTTP(httptest.NewRecorder(), req)
	if signedIn(New("127.0.0.1:8787", store)) {
		t.Fatal("a session signed out came back after a restart")
	}
}
