package node

import (
	"archive/tar"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/gpunex/gpunex/ledger"
	chain "github.com/gpunex/gpunex/ledger/solana"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/dashboard"
	"github.com/gpunex/gpunex/protocol"
)

// serveDashboard starts a node's API (and so its dashboard) and returns its base URL and
// a function giving a fresh one-time login link, asked with the API token as `gpunex
// dashboard` does.
func serveDashboard(t testing.TB, n *Node) (base string, link func() string) {
	t.Helper()
	token := fmt.Sprintf("token-%x", time.Now().UnixNano())
	srv, err := n.ServeAPI("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	base = "http://" + srv.Addr()
	return base, func() string {
		req, _ := http.NewRequest("POST", base+"/v1/dashboard/link", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var l api.DashboardLink
		if err := json.NewDecoder(resp.Body).Decode(&l); err != nil || resp.StatusCode != 200 || !strings.HasPrefix(l.URL, base+"/login?code=") {
			t.Fatalf("dashboard link: %d %+v %v", resp.StatusCode, l, err)
		}
		return l.URL
	}
}

// noRedirects is an HTTP client that shows redirects rather than following them.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// TestDashboardSessions: the dashboard is behind a session that only a one-time link
// opens. The link's redirect gives the page the session's key in its fragment; every API
// request needs the key besides the cookie, so the cookie alone (which browsers hand to any
// port of 127.0.0.1) opens nothing, and another site cannot forge a request. A request
// naming another host (DNS rebinding) is refused. Pages carry a strict CSP.
func TestDashboardSessions(t *testing.T) {
	tn := newTestNet(t)
	prov := tn.add(providerConfig(0), nil)
	base, link := serveDashboard(t, prov)
	call := func(method, path string, cookie *http.Cookie, key, host, body string) *http.Response {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if cookie != nil {
			req.AddCookie(cookie)
		}
		if key != "" {
			req.Header.Set(dashboard.KeyHeader, key)
		}
		if host != "" {
			req.Host = host
		}
		resp, err := noRedirects.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	get := func(path string, cookie *http.Cookie, key, host string) *http.Response {
		return call("GET", path, cookie, key, host, "")
	}

	// No session: the pages send to the login page, the API answers 401.
	if r := get("/ui/", nil, "", ""); r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/login" {
		t.Fatalf("/ui/ without a session: %d %q", r.StatusCode, r.Header.Get("Location"))
	}
	if r := get("/v1/status", nil, "", ""); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("API without a session: %d", r.StatusCode)
	}
	login := get("/login", nil, "", "")
	if body, _ := io.ReadAll(login.Body); login.StatusCode != 200 || !strings.Contains(string(body), "gpunex dashboard") {
		t.Fatalf("login page: %d %s", login.StatusCode, body)
	}

	// The link opens a session once, and hands the page its key in the fragment.
	url := link()
	r := get(strings.TrimPrefix(url, base), nil, "", "")
	m := regexp.MustCompile(`^/ui/#key=([0-9a-f]{64})$`).FindStringSubmatch(r.Header.Get("Location"))
	if r.StatusCode != http.StatusSeeOther || m == nil {
		t.Fatalf("opening the link: %d %q", r.StatusCode, r.Header.Get("Location"))
	}
	key := m[1]
	var cookie *http.Cookie
	for _, c := range r.Cookies() {
		if strings.HasPrefix(c.Name, "gpunex_session_") {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("session cookie: %+v", cookie)
	}
	if r := get(strings.TrimPrefix(url, base), nil, "", ""); r.StatusCode != http.StatusUnauthorized || len(r.Cookies()) != 0 {
		t.Fatalf("the link opened a second session: %d", r.StatusCode)
	}

	// The page, with its policy, and without the key.
	page := get("/ui/", cookie, "", "")
	body, _ := io.ReadAll(page.Body)
	if page.StatusCode != 200 || !strings.Contains(string(body), "/ui/assets/app.js") || strings.Contains(string(body), key) {
		t.Fatalf("dashboard page: %d %s", page.StatusCode, body)
	}
	if csp := page.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe-inline") {
		t.Fatalf("CSP: %q", csp)
	}
	if r := get("/v1/status", cookie, key, ""); r.StatusCode != 200 || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("API with a session: %d, Cache-Control %q", r.StatusCode, r.Header.Get("Cache-Control"))
	}
	// The cookie alone, as a program on another port of this machine would have it.
	if r := get("/v1/status", cookie, "", ""); r.StatusCode != http.StatusForbidden {
		t.Fatalf("API with the cookie and no key: %d", r.StatusCode)
	}
	// DNS rebinding: the browser names the attacker's host.
	if r := get("/v1/status", cookie, key, "attacker.example:8080"); r.StatusCode != http.StatusForbidden {
		t.Fatalf("API with a session, for another host: %d", r.StatusCode)
	}
	if r := get("/ui/", cookie, "", "attacker.example"); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("page for another host: %d", r.StatusCode)
	}

	// A change without the key, or with a wrong one, fails and changes nothing; with it, it
	// works.
	model := prov.publisher.Current().Offer.GPUs[0].Model
	before := prov.publisher.Current().Offer.GPUs[0].PricePerGPUHour
	price := fmt.Sprintf(`{"model":%q,"usdc":"4.44"}`, model)
	for _, k := range []string{"", strings.Repeat("0", 64)} {
		if r := call("POST", "/v1/provider/price", cookie, k, "", price); r.StatusCode != http.StatusForbidden || prov.publisher.Current().Offer.GPUs[0].PricePerGPUHour != before {
			t.Fatalf("POST with key %q: %d, price %s", k, r.StatusCode, prov.publisher.Current().Offer.GPUs[0].PricePerGPUHour)
		}
	}
	if r := call("POST", "/v1/provider/price", cookie, key, "", price); r.StatusCode != 200 || prov.publisher.Current().Offer.GPUs[0].PricePerGPUHour != 4_440_000 {
		t.Fatalf("POST with the key: %d", r.StatusCode)
	}
	// A session cannot make login links: only the token can, not even with another
	// Authorization header beside the session.
	if r := call("POST", "/v1/dashboard/link", cookie, key, "", ""); r.StatusCode != http.StatusForbidden {
		t.Fatalf("a session asked for a login link: %d", r.StatusCode)
	}
	req, _ := http.NewRequest("POST", base+"/v1/dashboard/link", nil)
	req.AddCookie(cookie)
	req.Header.Set(dashboard.KeyHeader, key)
	req.Header.Set("Authorization", "x")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a session with an Authorization header asked for a login link: %v %v", resp, err)
	}
	// The API closes at once with an event stream open: the stream does not hold the
	// node's shutdown.
	srv, err := prov.ServeAPI("127.0.0.1:0", "other-token")
	if err != nil {
		t.Fatal(err)
	}
	events, err := http.Get("http://" + srv.Addr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	events.Body.Close()
	req, _ = http.NewRequest("GET", "http://"+srv.Addr()+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer other-token")
	events, err = http.DefaultClient.Do(req)
	if err != nil || events.StatusCode != 200 {
		t.Fatalf("events: %v %v", events, err)
	}
	defer events.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := srv.Close(ctx); err != nil {
		t.Fatalf("closing the API with an event stream open: %v", err)
	}

	// A download ticket: asked for with the key, for a job's output only; followed once,
	// with the session's cookie, as an attachment.
	if r := call("POST", "/v1/dashboard/download", cookie, key, "", `{"path":"/v1/status"}`); r.StatusCode != http.StatusBadRequest {
		t.Fatalf("a ticket for /v1/status: %d", r.StatusCode)
	}
	if r := call("POST", "/v1/dashboard/download", cookie, "", "", `{"path":"/v1/jobs/0123456789abcdef/output"}`); r.StatusCode != http.StatusForbidden {
		t.Fatalf("a ticket asked without the key: %d", r.StatusCode)
	}
	r = call("POST", "/v1/dashboard/download", cookie, key, "", `{"path":"/v1/jobs/0123456789abcdef/output"}`)
	var tk api.DashboardLink
	if err := json.NewDecoder(r.Body).Decode(&tk); err != nil || r.StatusCode != 200 || !strings.HasPrefix(tk.URL, "/download/") {
		t.Fatalf("a ticket for a job's output: %d %+v %v", r.StatusCode, tk, err)
	}
	if r := get(tk.URL, nil, "", ""); r.StatusCode != http.StatusForbidden {
		t.Fatalf("a ticket followed without the cookie: %d", r.StatusCode)
	}
	if r := get(tk.URL, cookie, "", "attacker.example"); r.StatusCode != http.StatusForbidden {
		t.Fatalf("a ticket followed for another host: %d", r.StatusCode)
	}
	// Another session cannot follow this session's ticket (and spends it doing so).
	other := get(strings.TrimPrefix(link(), base), nil, "", "")
	var otherCookie *http.Cookie
	for _, c := range other.Cookies() {
		if strings.HasPrefix(c.Name, "gpunex_session_") {
			otherCookie = c
		}
	}
	if otherCookie == nil || otherCookie.Value == cookie.Value {
		t.Fatalf("a second session: %+v", otherCookie)
	}
	if r := get(tk.URL, otherCookie, "", ""); r.StatusCode != http.StatusForbidden {
		t.Fatalf("a ticket followed by another session: %d", r.StatusCode)
	}
	r = call("POST", "/v1/dashboard/download", cookie, key, "", `{"path":"/v1/jobs/0123456789abcdef/output"}`)
	json.NewDecoder(r.Body).Decode(&tk)
	// No such job: the output route answers, not the gate, and its error is no attachment
	// saved under the tar's name.
	if r := get(tk.URL, cookie, "", ""); r.StatusCode != http.StatusNotFound || r.Header.Get("Content-Disposition") != "" {
		t.Fatalf("a ticket of a job with no output: %d, %q", r.StatusCode, r.Header.Get("Content-Disposition"))
	}
	if r := get(tk.URL, cookie, "", ""); r.StatusCode != http.StatusForbidden {
		t.Fatalf("a ticket followed twice: %d", r.StatusCode)
	}

	// Signing out ends the session.
	if r := call("POST", "/logout", cookie, key, "", ""); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign out: %d", r.StatusCode)
	}
	if r := get("/v1/status", cookie, key, ""); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("API after signing out: %d", r.StatusCode)
	}
}

// TestDashboardInBrowser drives the three roles' dashboards in a real headless Chromium
// against an in-process network with real containers: a price changed in the provider's
// Pricing tab reaches the renter's Offers tab; an application approved in the coordinator's
// queue puts the new provider's offer there; a job started from the renter's page streams
// its output and ends with its exit code and cost; the provider's Payments tab shows what
// it earned, then, after the coordinator ran a payout batch from its Payouts tab (on a local
// Solana runtime), the payout with its transaction; a provider revoked from the
// coordinator's Providers tab leaves the Offers tab; an applicant's markup shows as text on
// the coordinator's page. No page asks for anything outside the node or reports a script
// error or CSP violation, and the pages fit a phone's width. With
// GPUNEX_DASHBOARD_SHOTS=DIR, each tab is saved as DIR/ROLE-TAB.png (make screenshots
// writes docs/dashboard/).
func TestDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("containerd and chromium")
	}
	chromiumPath(t)
	shots := os.Getenv("GPUNEX_DASHBOARD_SHOTS")
	fastOnboarding(t)
	rt := testRuntime(t)
	// The coordinator pays on a local Solana runtime; its treasury holds the renter's
	// deposit (credited below without a transfer).
	e := newChainEnv(t)
	e.fund(t, e.treasury.PublicKey(), 10_000_000)
	ccfg := e.coordinatorConfig()
	ccfg.Coordinator.ProbeInterval = config.Duration{Duration: 200 * time.Millisecond}
	tn := newTestNetWith(t, ccfg)
	coord := tn.boot
	provider := func(i int) *Node {
		cfg := providerConfig(i)
		cfg.Provider.GPUs[0].Count, cfg.Provider.GPUs[0].PriceUSDC = 1, "3.60"
		cfg.Jobs.MemoryMBPerGPU, cfg.Jobs.ScratchMB, cfg.Jobs.Pids = 64, 16, 64
		cfg.Jobs.RequireEscrow = true
		wallet, _ := chain.NewKeypair()
		cfg.Payout = config.PayoutConfig{Method: protocol.PayoutUSDC, Schedule: protocol.PayoutWeekly, SolanaAddress: wallet.PublicKey().String()}
		return tn.addNode(cfg, Deps{Sandbox: rt, JobsDir: t.TempDir()}, false)
	}
	prov := provider(0)
	applyApproved(t, coord, prov)
	// The renter has USDC in its own Solana wallet, and deposits from its Wallet tab.
	rcfg, renterWallet := e.renterConfig(t, 20_000_000)
	renter := tn.add(rcfg, nil)
	eventually(t, 20*time.Second, "the renter sees the provider", func() (bool, string) {
		_, ok := providersIn(search(t, renter, api.SearchFilter{}))[prov.ID().String()]
		return ok, ""
	})

	provBase, provLink := serveDashboard(t, prov)
	rentBase, rentLink := serveDashboard(t, renter)
	coordBase, coordLink := serveDashboard(t, coord)
	b := newBrowser(t, "en-US", 1280, 1000)
	pp, rp, cp := b.page(t, provBase), b.page(t, rentBase), b.page(t, coordBase)
	pp.open(strings.TrimPrefix(provLink(), provBase))
	rp.open(strings.TrimPrefix(rentLink(), rentBase))
	cp.open(strings.TrimPrefix(coordLink(), coordBase))

	rp.tab("wallet")
	rp.set("main .card input", "10")
	rp.clickText("main", "Deposit")
	rp.wait("the deposit credited", `document.querySelector('p.ok') && document.querySelector('p.ok').innerText.includes('credited')`)
	if a, _ := coord.ledger.Escrow.GetAccount(renter.ID().String()); a.Deposited != 10_000_000 || e.usdc(t, renterWallet) != 10_000_000 {
		t.Fatalf("after a deposit of 10 USDC from the Wallet tab: account %+v, wallet %d", a, e.usdc(t, renterWallet))
	}

	// The provider changes its price in the Pricing tab; the renter's Offers tab shows it.
	pp.tab("pricing")
	pp.wait("the price field", `document.querySelector('input[data-model]')`)
	pp.set("input[data-model]", "36")
	pp.clickText(".card", "Apply")
	pp.wait("the price applied", `document.querySelector('p.ok') && document.querySelector('p.ok').innerText.includes('announced')`)
	// Maintenance planned from the same tab, in an hour for an hour (the browser's local
	// time), is announced in the offer.
	pp.eval(`(() => { const pad = (n) => String(n).padStart(2, '0');
		const f = (d) => d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + 'T' + pad(d.getHours()) + ':' + pad(d.getMinutes());
		const at = document.querySelectorAll('main input[type=datetime-local]');
		at[0].value = f(new Date(Date.now() + 3600e3)); at[1].value = f(new Date(Date.now() + 7200e3)); })()`, nil)
	pp.set("#maintenance-note", "new fans")
	pp.clickText(".card", "Plan maintenance")
	pp.wait("the maintenance planned", `document.querySelector('#maintenance-list').innerText.includes('new fans')`)
	if ws := prov.publisher.Current().Offer.Maintenance; len(ws) != 1 || ws[0].From.Before(time.Now().Add(50*time.Minute)) || ws[0].To.Sub(ws[0].From) < 59*time.Minute {
		t.Fatalf("the maintenance planned in the dashboard is announced as %+v", ws)
	}
	rp.tab("offers")
	offer := offerOf(prov)
	for deadline := time.Now().Add(20 * time.Second); ; {
		rp.clickText("form", "Search")
		rp.wait("search results", `document.querySelector('#offer-results table, #offer-results p')`)
		if got := rp.text(fmt.Sprintf(`[data-offer="%s"]`, offer)); strings.Contains(got, "36.00") {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the renter's Offers tab shows %q for %s, not the new price 36.00", got, offer)
		}
		time.Sleep(300 * time.Millisecond)
	}

	// A second provider applies; the coordinator approves it in its queue; its offer
	// reaches the renter's Offers tab.
	// Its applicant writes markup into the form: the coordinator's page shows it as text.
	second := provider(1)
	form := applicationForm(second.cfg, false, 1)
	hostile := `<img src="/ui/assets/pwned.png" onerror="document.body.dataset.pwned='yes'">`
	form.Name, form.Company = hostile, hostile
	app2, err := second.applicant.Submit(form)
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, second, protocol.StatusPending)
	cp.tab("applications")
	cp.wait("the application in the queue", fmt.Sprintf(`[...document.querySelectorAll('#application-queue code')].some(e => e.innerText === %q)`, app2.ID))
	cp.eval(fmt.Sprintf(`[...document.querySelectorAll('#application-queue tr')].find(r => r.innerText.includes(%q)).querySelector('button').click()`, app2.ID), nil)
	cp.wait("the application's details", `document.querySelector('.decision select')`)
	var injected struct {
		Images int    `json:"images"`
		Pwned  string `json:"pwned"`
		Shown  bool   `json:"shown"`
	}
	cp.eval(fmt.Sprintf(`({images: document.querySelectorAll('main img').length, pwned: document.body.dataset.pwned || '',
		shown: document.querySelector('main').innerText.includes(%q)})`, hostile), &injected)
	if injected.Images != 0 || injected.Pwned != "" || !injected.Shown {
		t.Fatalf("an applicant's markup on the coordinator's page: %+v", injected)
	}
	cp.set(".decision input", "alice")
	cp.clickText(".decision", "Record the decision")
	cp.wait("the decision recorded", `document.querySelector('p.ok')`)
	waitStatus(t, second, protocol.StatusApproved)
	for deadline := time.Now().Add(30 * time.Second); ; {
		rp.clickText("form", "Search")
		rp.wait("search results", `document.querySelector('#offer-results table, #offer-results p')`)
		if rp.text(fmt.Sprintf(`[data-offer="%s"]`, offerOf(second))) != "" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the approved provider's offer did not reach the renter's Offers tab:\n%s", rp.text("#offer-results"))
		}
		time.Sleep(300 * time.Millisecond)
	}

	// A job from the renter's page: its output streams in, it ends with its exit code and
	// cost.
	rp.tab("run")
	rp.set("main form input[placeholder^='peer ID']", offer)
	rp.set("main form input[placeholder='/path/to/image.tar']", busyboxArchive(t))
	rp.set("main form input[placeholder='python train.py']", `sh -c "echo hello from the dashboard; echo 42 > /output/result.txt; sleep 3; exit 3"`)
	rp.set("main form input[type=number][step=any]", "0.05")
	rp.clickText("form", "Start the job")
	rp.wait("the job's page", `location.hash === '#jobs' && document.querySelector('#job-log')`)
	rp.wait("the job's output", `document.querySelector('#job-log').innerText.includes('hello from the dashboard')`)
	rp.wait("the job's end", `document.querySelector('#job-exit')`)
	if exit, cost := rp.text("#job-exit"), rp.text("#job-cost"); !strings.HasPrefix(exit, "3") || !regexp.MustCompile(`^[0-9.]*[1-9][0-9.]*\x{a0}USDC$`).MatchString(cost) {
		t.Fatalf("the ended job shows exit %q, cost %q", exit, cost)
	}
	// "Download the output": the browser saves the job's /output as a tar, through a
	// one-time ticket (the page does not hold the file).
	downloads := t.TempDir()
	if _, err := chromedp.Call(rp.ctx, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllow, DownloadPath: downloads}); err != nil {
		t.Fatal(err)
	}
	rp.clickText("main", "Download the output")
	eventually(t, 20*time.Second, "the output saved by the browser", func() (bool, string) {
		files, _ := filepath.Glob(filepath.Join(downloads, "*-output.tar"))
		if len(files) != 1 {
			return false, fmt.Sprint(files)
		}
		f, err := os.Open(files[0])
		if err != nil {
			return false, err.Error()
		}
		defer f.Close()
		tr := tar.NewReader(f)
		for h, err := tr.Next(); err == nil; h, err = tr.Next() {
			if strings.TrimPrefix(h.Name, "./") == "result.txt" {
				b, _ := io.ReadAll(tr)
				return string(b) == "42\n", fmt.Sprintf("result.txt holds %q", b)
			}
		}
		return false, "no result.txt in " + files[0]
	})

	// A job by model: the renter names a model, not an offer; the node places it on the
	// best offer of that model and the job's page says which provider took it and why.
	rp.tab("run")
	rp.set("main form input[placeholder^='peer ID']", "")
	rp.set("main form input[placeholder='H100-80GB']", declaredModel(second))
	rp.set("main form input[placeholder='/path/to/image.tar']", busyboxArchive(t))
	rp.set("main form input[placeholder='python train.py']", "echo placed by model")
	rp.set("main form input[type=number][step=any]", "0.05")
	rp.clickText("form", "Start the job")
	rp.wait("the placed job's output", `location.hash === '#jobs' && document.querySelector('#job-log') && document.querySelector('#job-log').innerText.includes('placed by model')`)
	if got := rp.text("#job-placement"); !strings.Contains(got, second.ID().String()+" took the job") {
		t.Fatalf("the placed job's page says %q, not that %s took it", got, second.ID())
	}

	// The provider's Payments tab: the job's earnings, live; then, once the coordinator ran
	// a payout batch from its Payouts tab, the payout with its transaction.
	pp.tab("payments")
	pp.wait("the job's earnings", `document.querySelector('#earned-total') && /^[0-9.,]*[1-9]/.test(document.querySelector('#earned-total').innerText)`)
	eventually(t, 10*time.Second, "the provider's payout settings at the coordinator", func() (bool, string) {
		_, err := coord.ledger.Payouts.GetPayoutSettings(prov.ID().String())
		return err == nil, fmt.Sprint(err)
	})
	cp.tab("payouts")
	cp.clickText("main", "Run payouts now")
	cp.wait("the batch settled", `document.querySelector('p.ok') && document.querySelector('p.ok').innerText.includes('settled')`)
	pp.wait("the payout with its transaction", `document.querySelector('.tx')`)

	// The provider switches to bank transfers in its payout settings (typed with spaces);
	// the coordinator holds them. The next job's earnings go into a bank batch, whose file
	// the coordinator reads and whose transfer it confirms with the bank's reference; the
	// provider sees it paid.
	pp.set("#payout-method", "bank")
	pp.set("#payout-holder", "Ada GPU SARL")
	pp.set("#payout-iban", "FR14 2004 1010 0505 0001 3M02 606")
	pp.set("#payout-bic", "PSSTFRPPPAR")
	pp.clickText("#payout-settings", "Save payout settings")
	pp.wait("the payout settings saved", `document.querySelector('#payout-now').innerText.includes('FR1420041010050500013M02606')`)
	eventually(t, 10*time.Second, "the coordinator holds the bank details", func() (bool, string) {
		s, _ := coord.ledger.Payouts.GetPayoutSettings(prov.ID().String())
		return s.IBAN == "FR1420041010050500013M02606", s.Method
	})
	pp.wait("the settings delivered", `document.querySelector('#payout-deliveries').innerText.includes('since')`)
	j, err := renter.renter.ProposeJob(context.Background(), api.JobRequest{Offer: offer, GPUs: 1, MaxSeconds: 60, ImageArchive: busyboxArchive(t), Args: []string{"sh", "-c", "sleep 3"}})
	if err != nil {
		t.Fatal(err)
	}
	if final, err := renter.renter.JobLogs(context.Background(), j.ID, true, io.Discard); err != nil || final.State != "ended" {
		t.Fatalf("the second job: %+v %v", final, err)
	}
	eventually(t, 15*time.Second, "the second job's earning at the coordinator", func() (bool, string) {
		h, _ := coord.ledger.Escrow.GetHold(j.ID)
		return h.State == ledger.HoldCharged, h.State
	})
	cp.tab("payouts")
	cp.clickText("main", "Run payouts now")
	cp.wait("the bank batch", `document.querySelector('p.ok') && document.querySelector('p.ok').innerText.includes('settling')`)
	cp.wait("the bank batch in the list", `[...document.querySelectorAll('#batches tr')].some(r => r.innerText.includes('settling'))`)
	cp.eval(`[...document.querySelectorAll('#batches tr')].find(r => r.innerText.includes('settling')).querySelector('button').click()`, nil)
	cp.clickText("main", "Bank transfer file")
	cp.wait("the bank file", `document.querySelector('main pre.log') && document.querySelector('main pre.log').innerText.includes('FR1420041010050500013M02606')`)
	cp.set("main input[autocomplete=off]", "BANK-REF-77")
	cp.clickText("main", "Confirm the bank transfers")
	cp.wait("the transfers confirmed", `[...document.querySelectorAll('p.ok')].some(e => e.innerText.includes('confirmed'))`)
	bs, _ := coord.ledger.Payouts.Batches()
	last := slices.MaxFunc(bs, func(a, b ledger.Batch) int { return strings.Compare(a.Batch, b.Batch) })
	i := slices.IndexFunc(last.Payouts, func(p protocol.Payout) bool { return p.Provider == prov.ID().String() })
	if last.State != protocol.BatchSettled || i < 0 || last.Payouts[i].Method != protocol.PayoutBank || !last.Payouts[i].Paid || last.Payouts[i].Amount < 10_000 {
		t.Fatalf("the bank batch after its confirmation: %+v", last)
	}
	pp.wait("the bank payout paid on the provider's page", `[...document.querySelectorAll('main tr')].some(r => r.innerText.includes('bank') && r.innerText.includes('paid'))`)

	// The coordinator's Providers tab names each provider's certificate and its expiry.
	cp.tab("providers")
	cp.wait("the certificates", fmt.Sprintf(`[...document.querySelectorAll('main tr')].some(r => r.querySelector('code') && r.querySelector('code').title === %q && /#[0-9]+ · Expires/.test(r.innerText))`, prov.ID().String()))

	// The coordinator revokes the second provider from its Providers tab; its offer leaves
	// the renter's Offers tab.
	cp.tab("providers")
	row := fmt.Sprintf(`[...document.querySelectorAll('main tr')].find(r => r.querySelector('code') && r.querySelector('code').title === %q)`, second.ID().String())
	cp.wait("the second provider's score", row)
	cp.eval(fmt.Sprintf(`(() => { const r = %s; r.querySelector('input').value = 'failed audit'; r.querySelector('button').click(); })()`, row), nil)
	cp.wait("the revocation", `document.querySelector('p.ok') && document.querySelector('p.ok').innerText.includes('revoked')`)
	rp.tab("offers")
	for deadline := time.Now().Add(20 * time.Second); ; {
		rp.clickText("form", "Search")
		rp.wait("search results", `document.querySelector('#offer-results table, #offer-results p')`)
		if rp.text(fmt.Sprintf(`[data-offer="%s"]`, offerOf(second))) == "" && rp.text(fmt.Sprintf(`[data-offer="%s"]`, offer)) != "" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the revoked provider's offer is still in the renter's Offers tab:\n%s", rp.text("#offer-results"))
		}
		time.Sleep(300 * time.Millisecond)
	}

	// The provider reads the output of the job it ran on its own Jobs tab.
	pp.tab("jobs")
	pp.wait("the provider's jobs", `document.querySelector('main table a')`)
	pp.eval(`[...document.querySelectorAll('main table tr')].find(r => /\t3 exited/.test(r.innerText)).querySelector('a').click()`, nil)
	pp.wait("the job's output on the provider's page", `document.querySelector('#job-log') && document.querySelector('#job-log').innerText.includes('hello from the dashboard')`)

	// The provider runs its benchmarks from the Benchmarks tab: the progress streams in and
	// the new attestation is drawn.
	before := prov.bench.Latest().Seq
	pp.tab("benchmarks")
	pp.clickText("main", "Run the benchmarks now")
	pp.wait("the benchmarks run", `document.querySelector('p.ok') && document.querySelector('pre.log').innerText.length > 0`)
	if after := prov.bench.Latest(); after == nil || after.Seq <= before {
		t.Fatalf("the run from the dashboard made no new attestation: %d, then %+v", before, after)
	}
	// Both runs are in the history chart, one point each for its GPU.
	pp.wait("the benchmark history", `document.querySelectorAll('#bench-history circle').length >= 2`)

	// The Performance tab draws the score over time and the week's hours: the coordinator
	// probes every 200 ms, so the current hour is declared and answered.
	pp.tab("performance")
	pp.wait("the score history", `document.querySelectorAll('#score-history polyline').length >= 2`)
	pp.wait("the week", `/^[1-9][0-9]* of [0-9]+ declared hours answered/.test(document.querySelector('#uptime-week').innerText) && document.querySelector('rect.hour.answered')`)

	// Every tab of every role: drawn without script errors, fits a phone, screenshots.
	for _, c := range []struct {
		p    *page
		role string
		tabs []string
	}{{pp, "provider", []string{"overview", "application", "benchmarks", "pricing", "payments", "performance", "jobs"}},
		{rp, "renter", []string{"offers", "run", "jobs", "wallet"}},
		{cp, "coordinator", []string{"applications", "providers", "payouts", "market", "disputes"}}} {
		for _, tab := range c.tabs {
			c.p.tab(tab)
			time.Sleep(300 * time.Millisecond) // the tab's data
			c.p.shot(shots, c.role+"-"+tab)
		}
		c.p.checkClean()
	}

	// Phone width: nothing wider than the screen but the tables' own scrolling boxes.
	phone := newBrowser(t, "en-US", 390, 844)
	pm := phone.page(t, provBase)
	pm.open(strings.TrimPrefix(provLink(), provBase))
	for _, tab := range []string{"overview", "pricing", "payments"} {
		pm.tab(tab)
		var wide int
		pm.eval(`document.documentElement.scrollWidth - window.innerWidth`, &wide)
		if wide > 0 {
			t.Errorf("on a phone, the %s tab is %d px wider than the screen", tab, wide)
		}
	}
	pm.checkClean()
}

// TestDashboardInFrench: a browser set to French gets the dashboard in French without
// choosing it; every label of every tab comes from the French catalogue (none left in
// English), and USDC amounts follow French number formats.
func TestDashboardInFrench(t *testing.T) {
	chromiumPath(t)
	tn := newTestNet(t)
	prov := tn.add(providerConfig(0), nil)
	renter := tn.add(testConfig(config.RoleRenter), nil)
	raw, err := dashboard.Messages()
	if err != nil {
		t.Fatal(err)
	}
	var cat map[string]map[string]string
	if err := json.Unmarshal(raw, &cat); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, "fr-FR", 1280, 1000)
	for _, c := range []struct {
		n    *Node
		tabs []string
	}{{prov, []string{"overview", "application", "benchmarks", "pricing", "payments", "performance", "jobs"}},
		{renter, []string{"offers", "run", "jobs", "wallet"}},
		{tn.boot, []string{"applications", "providers", "payouts", "market", "disputes"}}} {
		base, link := serveDashboard(t, c.n)
		p := b.page(t, base)
		p.open(strings.TrimPrefix(link(), base))
		var lang string
		p.eval(`document.documentElement.lang`, &lang)
		if lang != "fr" {
			t.Fatalf("a French browser got the dashboard in %q", lang)
		}
		for _, tab := range c.tabs {
			p.tab(tab)
			time.Sleep(200 * time.Millisecond)
			var labels [][2]string
			p.eval(`[...document.querySelectorAll('[data-i18n]')].filter(e => e.offsetParent !== null || e.tagName === 'OPTION').map(e => [e.dataset.i18n, e.textContent])`, &labels)
			if len(labels) < 3 {
				t.Fatalf("tab %s: %d labels", tab, len(labels))
			}
			for _, l := range labels {
				fr, ok := cat["fr"][l[0]]
				switch {
				case !ok:
					t.Errorf("tab %s: label %q has no French text", tab, l[0])
				case l[1] != fr:
					t.Errorf("tab %s: label %q reads %q, not the French %q", tab, l[0], l[1], fr)
				}
			}
		}
		p.checkClean()
	}
	// The score's "why" events, which coordinators write in English, read in French.
	now := time.Now()
	raw, err = protocol.Seal(protocol.KindScore, protocol.ScoreRecord{Version: protocol.ScoreVersion, Coordinator: tn.boot.ID().String(),
		Provider: prov.ID().String(), Seq: 1, IssuedAt: now, ExpiresAt: now.Add(protocol.ScoreTTL), Score: 71, Uptime: 0.9, Completion: 0.8,
		Consistency: 0.9, HalfLifeSecs: 3600, Why: []string{protocol.WhyMissedProbe(time.Date(2026, 11, 30, 14, 5, 0, 0, time.UTC)),
			protocol.WhySlowerGPU("GPU-1234", 90), protocol.WhyInterrupted("0123456789abcdef", "containerd stopped")}}, tn.boot.peer.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := prov.scores.Take(raw, "test"); err != nil {
		t.Fatal(err)
	}
	pbase, plink := serveDashboard(t, prov)
	pp := b.page(t, pbase)
	pp.open(strings.TrimPrefix(plink(), pbase))
	pp.tab("performance")
	pp.wait("the why events", `document.querySelector('#score-why')`)
	why := pp.text("#score-why")
	for _, want := range []string{"sonde manquée lun. 14:05 UTC", "GPU GPU-1234 à 90 % de son premier benchmark", "tâche 0123456789abcdef interrompue : containerd stopped"} {
		if !strings.Contains(why, want) {
			t.Errorf("the why events in French lack %q:\n%s", want, why)
		}
	}

	// French formats: a price of 1 USDC reads "1,00 USDC" on the renter's Offers tab.
	base, link := serveDashboard(t, renter)
	p := b.page(t, base)
	p.open(strings.TrimPrefix(link(), base))
	p.tab("offers")
	p.clickText("form", "Rechercher")
	p.wait("a price in French format", fmt.Sprintf(`(document.querySelector('[data-offer="%s"]') || {}).innerText === '1,00\u00a0USDC'`, offerOf(prov)))
}

// BenchmarkDashboardLoad measures a provider dashboard's first page load on loopback in
// headless Chromium: from the navigation to the first tab drawn with its data (the page,
// its script, styles and messages, the status and the tab's API calls), with the
// browser's cache emptied each time; and the weight of the assets (target: under 300 ms
// and 500 KB). Each load navigates the tab from the dashboard to itself: a tab's very
// first navigation also starts the browser's renderer process, which is the browser's
// cost, not the page's (docs/dashboard.md).
func BenchmarkDashboardLoad(b *testing.B) {
	chromiumPath(b)
	tn := newTestNet(b)
	prov := tn.add(providerConfig(0), nil)
	base, link := serveDashboard(b, prov)
	br := newBrowser(b, "en-US", 1280, 1000)
	p := br.page(b, base)
	p.open(strings.TrimPrefix(link(), base))
	var total []time.Duration
	for b.Loop() {
		if _, err := chromedp.Call(p.ctx, network.ClearBrowserCache, cdp.Empty{}); err != nil {
			b.Fatal(err)
		}
		p.open(fmt.Sprintf("/ui/?load=%d", len(total)))
		var ms int
		p.eval(`Number(document.body.dataset.readyMs)`, &ms)
		total = append(total, time.Duration(ms)*time.Millisecond)
	}
	sizes, _ := dashboard.Assets()
	bytes := 0
	for _, n := range sizes {
		bytes += n
	}
	b.ReportMetric(float64(percentile(total, 0.5).Milliseconds()), "load-p50-ms")
	b.ReportMetric(float64(percentile(total, 0.95).Milliseconds()), "load-p95-ms")
	b.ReportMetric(float64(bytes)/1000, "assets-KB")
}

// TestDashboardDisputesInBrowser: a renter disputes a greedy provider's receipt; the
// coordinator's Disputes tab shows what the receipt claims, what the renter says and the
// floor the checkpoints prove; deciding for the renter from the page, with a note, charges
// the renter's figure and signs the decision with the note.
func TestDashboardDisputesInBrowser(t *testing.T) {
	chromiumPath(t)
	tn := newTestNet(t)
	coord := tn.boot
	prov := tn.add(providerConfig(0), nil)
	renter := tn.add(testConfig(config.RoleRenter), nil)
	coord.ledger.Escrow.CreditDeposit(ledger.Deposit{Signature: "test", Renter: renter.ID().String(), Amount: 100_000_000})
	waitCertified(t, coord, prov)
	j := greedyReceipt(t, coord, prov, renter, "00000000000000e1", 90)
	if err := disputeReceipt(t, renter, prov, &j, 100, "the job ended after 100 s"); err != nil {
		t.Fatal(err)
	}

	base, link := serveDashboard(t, coord)
	cp := newBrowser(t, "en-US", 1280, 1000).page(t, base)
	cp.open(strings.TrimPrefix(link(), base))
	cp.tab("disputes")
	row := `[...document.querySelectorAll('main tr')].find(r => r.innerText.includes('00000000000000e1'))`
	cp.wait("the dispute", row)
	var shown string
	cp.eval(row+`.innerText`, &shown)
	for _, want := range []string{"open", "3.00\u00a0USDC", "0.10\u00a0USDC", "0.09\u00a0USDC", "the job ended after 100 s"} {
		if !strings.Contains(shown, want) {
			t.Fatalf("the dispute's row lacks %q:\n%s", want, shown)
		}
	}
	cp.eval(`(() => { const r = `+row+`; const n = r.querySelector('input'); n.focus(); n.value = 'the logs agree with the renter';
		[...r.querySelectorAll('button')].find(b => b.innerText === 'For the renter').click(); })()`, nil)
	cp.wait("the decision recorded", `document.querySelector('p.ok') && document.querySelector('p.ok').innerText.includes('Decision recorded')`)
	if h, _ := coord.ledger.Escrow.GetHold(j.ID); h.State != ledger.HoldCharged || h.Rule != protocol.RuleDecision || h.Charge != 100_000 {
		t.Fatalf("the hold after a decision for the renter from the page: %+v", h)
	}
	if d, err := coord.settlement.Dispute(j.ID); err != nil || !strings.Contains(string(d.Decision), "the logs agree with the renter") {
		t.Fatalf("the signed decision lacks the note: %v %s", err, d.Decision)
	}
	cp.wait("the row decided", row+` && /decided/.test(`+row+`.innerText) && `+row+`.innerText.includes('0.10')`)
	cp.checkClean()
}
