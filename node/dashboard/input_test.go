package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestJobInputProgressShown: while a renter's input is hashed and then sent, the Jobs tab
// shows it above the jobs, with the bytes, the rate and the time left, following it every
// second without a reload; the leased job's details show the same line. Once done, the
// card goes.
func TestJobInputProgressShown(t *testing.T) {
	const job = "0123456789abcdef"
	var sent atomic.Int64
	var done atomic.Bool
	srv := httptest.NewUnstartedServer(nil)
	d := New(srv.Listener.Addr().String(), "")
	mux := http.NewServeMux()
	d.Register(mux)
	api := func(pattern string, answer func() string) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if ok, why := d.Authorize(r); !ok {
				http.Error(w, why, http.StatusForbidden)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, answer())
		})
	}
	upload := func() string {
		phase := "uploading"
		if done.Load() {
			phase = "done"
		}
		return fmt.Sprintf(`{"job":"%s","provider":"12D3KooWProvider","phase":"%s","bytes":%d,"hashed_bytes":%d,"held_bytes":%d,"sent_bytes":%d,"rate_bytes_per_second":%d,"eta_seconds":7}`,
			job, phase, 3<<30, 3<<30, 1<<30, sent.Add(100<<20), 200<<20)
	}
	jobView := func() string {
		return `{"id":"` + job + `","side":"renter","state":"leased","gpus":1,"model":"H100-80GB","seconds":0,"cost_usdc":"0","peer":"12D3KooWProvider","price_usdc_per_gpu_hour":"2.10","input":` + upload() + `}`
	}
	api("GET /v1/status", func() string {
		return `{"peer_id":"12D3KooWRenter","role":"renter","version":"test","peers":1,"reachability":"public"}`
	})
	api("GET /v1/offers", func() string { return `[]` })
	api("GET /v1/jobs", func() string { return `[` + jobView() + `]` })
	api("GET /v1/jobs/{id}", jobView)
	api("GET /v1/jobs/{id}/logs", func() string { return `` })
	api("GET /v1/uploads", func() string {
		return `[{"progress":"abc","phase":"hashing","bytes":1048576,"hashed_bytes":524288},` + upload() + `]`
	})
	mux.HandleFunc("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	srv.Config.Handler = mux
	srv.Start()
	t.Cleanup(srv.Close)
	ctx := headlessChromium(t)

	text := func(sel string) string {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		s, _ := chromedp.Run(c, chromedp.Evaluate[string](`(document.querySelector('`+sel+`') || {}).textContent || ''`))
		return s
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("never: %s", what)
			}
		}
	}
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(c, chromedp.Navigate(srv.URL+d.NewLink())); err != nil {
		t.Fatal(err)
	}
	waitFor("the dashboard drawn", func() bool {
		ready, _ := chromedp.Run(c, chromedp.Evaluate[bool](`document.body.dataset.ready === 'true'`))
		return ready
	})
	chromedp.Run(c, chromedp.Evaluate[bool](`(location.hash = '#jobs', true)`))
	waitFor("the inputs card", func() bool { return strings.Contains(text("#uploads"), "hashing 512") })
	first := text("#uploads")
	for _, want := range []string{"hashing 512", "of 2", "held by the provider already", "200", "/s", "7\u00a0s left", job} {
		if !strings.Contains(first, want) {
			t.Errorf("the inputs card lacks %q: %q", want, first)
		}
	}
	waitFor("the card following the upload", func() bool { return text("#uploads") != first })
	chromedp.Run(c, chromedp.Evaluate[bool](`(document.querySelector('main table a').click(), true)`))
	waitFor("the job's input in its details", func() bool { return strings.Contains(text("#job-input"), "sent") })
	done.Store(true)
	waitFor("the card gone once the input is done", func() bool { return text("#uploads") == "" || !strings.Contains(text("#uploads"), job) })
}
