package node

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"

	"github.com/gpunex/gpunex/ledger"
)

// TestJobPortInBrowser: a renter opens its running job's page from the dashboard in one
// click. The job (busybox httpd, no egress) is shown on the Jobs tab with its port and an
// Open button; the click opens a new tab on the job page's own origin
// (http://p8000-JOB.localhost:PORT/), which shows the job's page at its root. That page
// cannot read the node's API; without the browser's cookie the page's host refuses. A
// Shell button gives a shell in the job on the same page (its files, its user). Once the
// job ended, the shell ends and the page says so.
func TestJobPortInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("containerd and chromium")
	}
	chromiumPath(t)
	_, renter, prov := jobNetWith(t, 1)
	v := startHTTPJob(t, renter, prov)
	base, link := serveDashboard(t, renter)
	b := newBrowser(t, "en-US", 1280, 900)
	rp := b.page(t, base)
	rp.open(strings.TrimPrefix(link(), base))
	rp.tab("jobs")
	rp.wait("the job listed", fmt.Sprintf(`[...document.querySelectorAll('main a')].some((a) => a.innerText === %q)`, v.ID))
	rp.eval(fmt.Sprintf(`[...document.querySelectorAll('main a')].find((a) => a.innerText === %q).click()`, v.ID), nil)
	rp.wait("the job's port and its Open button", `document.querySelector('#job-ports button[data-port="8000"]')`)

	opened := chromedp.WaitNewTarget(rp.ctx, func(i *target.Info) bool { return i.Type == "page" })
	rp.eval(`document.querySelector('#job-ports button[data-port="8000"]').click()`, nil)
	var id target.ID
	select {
	case id = <-opened:
	case <-time.After(30 * time.Second):
		t.Fatalf("no tab opened by the Open button (problems: %v)", rp.Problems())
	}
	tab, cancel := chromedp.NewContext(b.ctx, chromedp.WithTargetID(id))
	defer cancel()
	// The first Run attaches to the tab, with a context that outlives it (a timeout on the
	// first Run would detach the tab when it passes).
	if err := chromedp.Do(tab); err != nil {
		t.Fatal(err)
	}
	jp := &page{t: t, ctx: tab}
	jp.wait("the job's page in the new tab", `document.body && document.body.innerText.includes('served-from-the-job')`)
	var where struct {
		Host, Path string
		API        string
	}
	jp.eval(`({ Host: location.host, Path: location.pathname })`, &where)
	jp.eval(fmt.Sprintf(`fetch(%q, { credentials: 'include', signal: AbortSignal.timeout(5000) }).then((r) => 'answered ' + r.status, (e) => 'refused: ' + e)`, base+"/v1/jobs"), &where.API)
	_, apiPort, _ := net.SplitHostPort(strings.TrimPrefix(base, "http://"))
	if want := fmt.Sprintf("p8000-%s.localhost:%s", v.ID, apiPort); where.Host != want || where.Path != "/" {
		t.Fatalf("the job's page opened at %s%s, want %s/", where.Host, where.Path, want)
	}
	if !strings.HasPrefix(where.API, "refused") {
		t.Fatalf("the job's page called the node's API: %s", where.API)
	}

	// The job page's host without the browser's cookie (another program, another browser).
	get := func(path string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.Host = where.Host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/index.html"); code != http.StatusForbidden || strings.Contains(body, "served-from-the-job") {
		t.Fatalf("the job's page without the cookie: %d %q", code, body)
	}

	// A shell in the job from the same page: the job's files, as the job's user.
	rp.eval(`document.querySelector('#job-shell').click()`, nil)
	rp.wait("the shell's input line", `document.querySelector('#shell-input')`)
	rp.eval(`(() => { const i = document.querySelector('#shell-input');
		i.value = 'cat /tmp/www/index.html; echo "uid $(id -u)"';
		i.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter' })); })()`, nil)
	rp.wait("the shell's answer", `document.querySelector('#shell-output').innerText.includes('uid 65534') &&
		document.querySelector('#shell-output').innerText.includes('served-from-the-job')`)

	if _, err := renter.renter.CancelJob(context.Background(), v.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the job ended for its renter", func() (bool, string) {
		j, err := renter.ledger.Jobs.GetJob(v.ID)
		return err == nil && j.State != ledger.JobRunning, ""
	})
	rp.wait("the shell ended with the job", `document.querySelector('#shell-input').disabled`)
	jp.run(chromedp.Reload())
	jp.wait("the page says the job no longer runs", `document.body && document.body.innerText.includes('while it runs')`)
	rp.checkClean()
}
