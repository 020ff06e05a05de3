package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestLargeJobLogStaysResponsive: a job's output of 64 MiB (what a provider keeps at most)
// streams into the Jobs tab of a real browser without freezing it. The page's timers keep
// running (no gap over 3 s: receiving 64 MiB at loopback speed alone stalls the browser
// for half a second on a busy 2-core machine), the end of the log shows within 60 s, and
// the page keeps only the log's tail, with a note naming the command that prints all of it.
// Appending each chunk to the text of the page took time that grew with the square of the
// log: minutes.
func TestLargeJobLogStaysResponsive(t *testing.T) {
	const size = 64 << 20
	const job = "0123456789abcdef"
	base, link := fakeNode(t, job, size)
	ctx := headlessChromium(t)

	// eval runs a script expression in the page; out receives its JSON value.
	eval := func(what, expr string, out any) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		raw, err := chromedp.Run(c, chromedp.Evaluate[string](`JSON.stringify((`+expr+`) ?? null)`))
		if err == nil && out != nil {
			err = json.Unmarshal([]byte(raw), out)
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// wait polls expr until it is true; the page must answer each poll within the time left.
	wait := func(what, expr string, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			c, cancel := context.WithDeadline(ctx, deadline)
			ok, err := chromedp.Run(c, chromedp.Evaluate[bool](`!!(`+expr+`)`))
			cancel()
			if err == nil && ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %s (%v)", what, within, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	c, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(c, chromedp.Navigate(link)); err != nil {
		t.Fatal(err)
	}
	wait("the dashboard drawn", `document.body.dataset.ready === 'true'`, 30*time.Second)
	// A timer that notes the longest time the page went without running it.
	eval("the heartbeat", `(() => { let last = performance.now(); window.maxGap = 0;
		setInterval(() => { const n = performance.now(); window.maxGap = Math.max(window.maxGap, n - last); last = n; }, 50); return true; })()`, nil)
	eval("the Jobs tab", `location.hash = '#jobs'`, nil)
	wait("the job listed", `document.querySelector('main table a')`, 30*time.Second)
	start := time.Now()
	eval("open the job", `document.querySelector('main table a').click()`, nil)
	wait("the end of the log", `document.querySelector('#job-log') && document.querySelector('#job-log').textContent.endsWith('the end of the log\n')`, 60*time.Second)
	took := time.Since(start)

	var view struct {
		MaxGap float64 `json:"maxGap"`
		Kept   int     `json:"kept"`
		Note   string  `json:"note"`
	}
	eval("the page", `({ maxGap: window.maxGap, kept: document.querySelector('#job-log').textContent.length,
		note: document.querySelector('#job-log-note').hidden ? '' : document.querySelector('#job-log-note').textContent })`, &view)
	t.Logf("a %d MiB log drawn in %s; the longest stall of the page %.0f ms; %d characters kept (%s, %s)",
		size>>20, took.Round(time.Millisecond), view.MaxGap, view.Kept, base, view.Note)
	if view.MaxGap > 3000 {
		t.Errorf("the page stalled %.0f ms while the log streamed", view.MaxGap)
	}
	if view.Kept > 64<<10 || view.Kept < 1000 {
		t.Errorf("the page holds %d characters of the log: the tail of at most 64 Ki is kept", view.Kept)
	}
	if !strings.Contains(view.Note, "gpunex job logs "+job) {
		t.Errorf("no note says the log's start was dropped and how to read it: %q", view.Note)
	}
}

// fakeNode serves the dashboard and the few API answers a renter's Jobs tab asks for: one
// running job whose log is size bytes of numbered lines ending with "the end of the log".
// It returns its address and a login link.
func fakeNode(t *testing.T, job string, size int) (base, link string) {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	d := New(srv.Listener.Addr().String(), "")
	mux := http.NewServeMux()
	d.Register(mux)
	api := func(pattern string, answer func(w http.ResponseWriter, r *http.Request)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if ok, why := d.Authorize(r); !ok {
				http.Error(w, why, http.StatusForbidden)
				return
			}
			answer(w, r)
		})
	}
	jsonAnswer := func(body string) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, body)
		}
	}
	jobView := `{"id":"` + job + `","side":"renter","state":"running","gpus":1,"model":"H100-80GB","seconds":1,"cost_usdc":"0.01","peer":"12D3KooWProvider","price_usdc_per_gpu_hour":"2.10"}`
	api("GET /v1/status", jsonAnswer(`{"peer_id":"12D3KooWRenter","role":"renter","version":"test","peers":1,"reachability":"public"}`))
	api("GET /v1/offers", jsonAnswer(`[]`))
	api("GET /v1/jobs", jsonAnswer(`[`+jobView+`]`))
	api("GET /v1/jobs/{id}", jsonAnswer(jobView))
	api("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	api("GET /v1/jobs/{id}/logs", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		var chunk strings.Builder
		end := "the end of the log\n"
		for n, line := 0, 0; n < size-len(end); {
			chunk.Reset()
			for chunk.Len() < 64<<10 && n+chunk.Len() < size-len(end)-80 {
				line++
				fmt.Fprintf(&chunk, "line %09d of a job that writes a lot, as training jobs do, step after step\n", line)
			}
			if chunk.Len() == 0 {
				break
			}
			if _, err := w.Write([]byte(chunk.String())); err != nil {
				return
			}
			n += chunk.Len()
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, end)
	})
	srv.Config.Handler = mux
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL, srv.URL + d.NewLink()
}

// headlessChromium starts Debian's chromium, headless: the test skips without it, or fails
// with GPUNEX_REQUIRE_BROWSER=1 (CI), where `make deps` installs it.
func headlessChromium(t *testing.T) context.Context {
	t.Helper()
	var path string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	switch {
	case path == "" && os.Getenv("GPUNEX_REQUIRE_BROWSER") == "1":
		t.Fatal("no chromium on PATH: make deps installs it")
	case path == "":
		t.Skip("no chromium on PATH (make deps installs it; GPUNEX_REQUIRE_BROWSER=1 makes this a failure)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}
