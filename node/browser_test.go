package node

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// A real headless Chromium (Debian's chromium) driven through the DevTools protocol, for
// the dashboard's tests: they see the pages as a user's browser does, scripts, styles,
// CSP and cookies included.

// chromiumPath finds Debian's chromium: the tests skip without it, or fail with
// GPUNEX_REQUIRE_BROWSER=1 (CI), where `make deps` installs it.
func chromiumPath(t testing.TB) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("GPUNEX_REQUIRE_BROWSER") == "1" {
		t.Fatal("no chromium on PATH: make deps installs it")
	}
	t.Skip("no chromium on PATH (make deps installs it; GPUNEX_REQUIRE_BROWSER=1 makes this a failure)")
	return ""
}

// browser is one Chromium process, with the preferred language given.
type browser struct {
	ctx context.Context
}

func newBrowser(t testing.TB, lang string, width, height int) *browser {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("lang", lang), chromedp.Flag("accept-lang", lang),
		chromedp.WindowSize(width, height), chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancel := chromedp.NewContext(actx)
	if err := chromedp.Do(bctx); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	t.Cleanup(func() { cancel(); cancelAlloc() })
	return &browser{ctx: bctx}
}

// page is one browser tab on one node's dashboard. It records every request the tab makes
// and every script error, CSP violation or failed load it reports.
type page struct {
	t    testing.TB
	ctx  context.Context
	base string // http://127.0.0.1:port

	mu       sync.Mutex
	requests []string
	problems []string
}

func (b *browser) page(t testing.TB, base string) *page {
	ctx, cancel := chromedp.NewContext(b.ctx)
	t.Cleanup(cancel)
	p := &page{t: t, ctx: ctx, base: base}
	err := chromedp.Listen(ctx, func(ev any) {
		p.mu.Lock()
		defer p.mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			p.requests = append(p.requests, e.Request.URL)
		case *runtime.EventExceptionThrown:
			d := e.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			p.problems = append(p.problems, fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber+1, msg))
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError {
				var args []string
				for _, a := range e.Args {
					args = append(args, cmp.Or(a.Description, fmt.Sprint(a.Value)))
				}
				p.problems = append(p.problems, "console.error: "+strings.Join(args, " "))
			}
		case *log.EventEntryAdded:
			// A 404 of the API is an answer ("nothing yet"), which the pages show as such.
			if e.Entry.Level == log.EntryLevelError && !(e.Entry.Source == log.EntrySourceNetwork && strings.Contains(e.Entry.Text, "status of 404")) {
				p.problems = append(p.problems, fmt.Sprintf("%s: %s (%s)", e.Entry.Source, e.Entry.Text, e.Entry.URL))
			}
		}
	})
	if err == nil {
		_, err = chromedp.Call(ctx, network.Enable, network.EnableParams{})
	}
	if err == nil {
		_, err = chromedp.Call(ctx, log.Enable, cdp.Empty{})
	}
	if err == nil {
		_, err = chromedp.Call(ctx, runtime.Enable, cdp.Empty{})
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *page) run(steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.t.Fatalf("browser: %v (problems: %v)", err, p.Problems())
	}
}

// open loads a path of the node and waits until the dashboard has drawn its first tab.
func (p *page) open(path string) {
	p.t.Helper()
	p.run(chromedp.Navigate(p.base + path))
	p.wait("the dashboard drawn", `document.body.dataset.ready === 'true' || location.pathname === '/login'`)
}

// tab switches to a tab of the dashboard and waits for its heading.
func (p *page) tab(name string) {
	p.t.Helper()
	p.eval(fmt.Sprintf(`location.hash = %q`, "#"+name), nil)
	p.wait("tab "+name, fmt.Sprintf(`document.querySelector('#tab-%s[aria-current="page"]') !== null && document.querySelector('main h1') !== null`, name))
}

// eval runs a script expression in the page (awaiting a promise); out receives its JSON
// value.
func (p *page) eval(expr string, out any) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](
		fmt.Sprintf(`Promise.resolve(%s).then(v => JSON.stringify(v === undefined ? null : v))`, expr), chromedp.EvalAwaitPromise))
	if err != nil {
		p.t.Fatalf("%s: %v (problems: %v)", expr, err, p.Problems())
	}
	if out != nil {
		if err := json.Unmarshal([]byte(raw), out); err != nil {
			p.t.Fatalf("%s: %v (%s)", expr, err, raw)
		}
	}
}

// wait polls a script expression until it is true, for at most 30 s.
func (p *page) wait(what, expr string) {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var ok bool
		p.eval(fmt.Sprintf(`!!(%s)`, expr), &ok)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			var body string
			p.eval(`document.querySelector('main') ? document.querySelector('main').innerText.slice(0, 3000) : document.body.innerText.slice(0, 3000)`, &body)
			p.t.Fatalf("%s: not within 30 s; the page shows:\n%s\nproblems: %v", what, body, p.Problems())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// text returns the text of the first element matching a CSS selector ("" when none).
func (p *page) text(sel string) string {
	p.t.Helper()
	var s string
	p.eval(fmt.Sprintf(`(document.querySelector(%q) || {}).innerText || ''`, sel), &s)
	return s
}

// set gives a form field a value, as typing it would (input and change events).
func (p *page) set(sel, value string) {
	p.t.Helper()
	var found bool
	p.eval(fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false;
		if (e.type === 'checkbox') e.checked = %q === 'true'; else e.value = %q;
		e.dispatchEvent(new Event('input', {bubbles: true})); e.dispatchEvent(new Event('change', {bubbles: true})); return true; })()`, sel, value, value), &found)
	if !found {
		p.t.Fatalf("no field %s on the page", sel)
	}
}

// clickText clicks the first button or link inside scope whose text is label.
func (p *page) clickText(scope, label string) {
	p.t.Helper()
	var found bool
	p.eval(fmt.Sprintf(`(() => { for (const e of document.querySelectorAll(%q + ' button, ' + %q + ' a')) {
		if (e.innerText.trim() === %q && !e.disabled) { e.click(); return true; } } return false; })()`, scope, scope, label), &found)
	if !found {
		var body string
		p.eval(`document.querySelector('main').innerText.slice(0, 2000)`, &body)
		p.t.Fatalf("no button %q in %s; the page shows:\n%s", label, scope, body)
	}
}

// shot saves a screenshot of the whole page to dir/name.png when dir is set.
func (p *page) shot(dir, name string) {
	p.t.Helper()
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// Requests returns every URL the tab asked for.
func (p *page) Requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.requests...)
}

// Problems returns the script errors, CSP violations and failed loads the tab reported.
func (p *page) Problems() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.problems...)
}

// checkClean fails the test on any script error or request outside the node.
func (p *page) checkClean() {
	p.t.Helper()
	if pr := p.Problems(); len(pr) > 0 {
		p.t.Errorf("the dashboard of %s reported problems:\n%s", p.base, strings.Join(pr, "\n"))
	}
	for _, u := range p.Requests() {
		if !strings.HasPrefix(u, p.base+"/") && !strings.HasPrefix(u, "data:") && !strings.HasPrefix(u, "blob:"+p.base) {
			p.t.Errorf("the dashboard of %s requested %s, outside the node", p.base, u)
		}
	}
}
