package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestJobExtendButton: on the Jobs tab, a running job the node rents has an Extend button
// with the hours to add; pressing it asks the node to extend the lease by those hours, and
// the job's details show the new end. An ended job has none.
func TestJobExtendButton(t *testing.T) {
	const job = "0123456789abcdef"
	var mu sync.Mutex
	state, ends, asked := "running", "2026-12-05T14:00:00Z", []float64{}
	srv := httptest.NewUnstartedServer(nil)
	d := New(srv.Listener.Addr().String(), "")
	mux := http.NewServeMux()
	d.Register(mux)
	api := func(pattern string, answer func(r *http.Request) string) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if ok, why := d.Authorize(r); !ok {
				http.Error(w, why, http.StatusForbidden)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, answer(r))
		})
	}
	jobView := func(*http.Request) string {
		mu.Lock()
		defer mu.Unlock()
		return `{"id":"` + job + `","side":"renter","state":"` + state + `","gpus":1,"model":"H100-80GB","seconds":60,"cost_usdc":"0.03","peer":"12D3KooWProvider","price_usdc_per_gpu_hour":"2.10","ends_at":"` + ends + `"}`
	}
	api("GET /v1/status", func(*http.Request) string {
		return `{"peer_id":"12D3KooWRenter","role":"renter","version":"test","peers":1,"reachability":"public"}`
	})
	api("GET /v1/offers", func(*http.Request) string { return `[]` })
	api("GET /v1/uploads", func(*http.Request) string { return `[]` })
	api("GET /v1/jobs", func(r *http.Request) string { return `[` + jobView(r) + `]` })
	api("GET /v1/jobs/{id}", jobView)
	api("GET /v1/jobs/{id}/logs", func(*http.Request) string { return `` })
	api("POST /v1/jobs/{id}/extend", func(r *http.Request) string {
		var req struct{ Hours float64 }
		json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		asked, ends = append(asked, req.Hours), "2026-12-05T16:30:00Z"
		mu.Unlock()
		return jobView(r)
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

	eval := func(js string) string {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		s, _ := chromedp.Run(c, chromedp.Evaluate[string](js))
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
	waitFor("the dashboard drawn", func() bool { return eval(`String(document.body.dataset.ready)`) == "true" })
	eval(`(location.hash = '#jobs', '')`)
	waitFor("the jobs listed", func() bool { return eval(`String(!!document.querySelector('main table a'))`) == "true" })
	eval(`(document.querySelector('main table a').click(), '')`)
	waitFor("the Extend button", func() bool { return eval(`String(!!document.querySelector('#job-extend'))`) == "true" })
	endsBefore := eval(`document.querySelector('.card').textContent`)
	eval(`(document.querySelector('#extend-hours').value = '2.5', document.querySelector('#job-extend').click(), '')`)
	waitFor("the extension asked", func() bool { mu.Lock(); defer mu.Unlock(); return len(asked) == 1 })
	if asked[0] != 2.5 {
		t.Fatalf("asked to extend by %v hours, want 2.5", asked[0])
	}
	waitFor("the new end shown", func() bool { return eval(`document.querySelector('.card').textContent`) != endsBefore })

	mu.Lock()
	state = "ended"
	mu.Unlock()
	eval(`(location.hash = '#wallet', '')`)
	eval(`(location.hash = '#jobs', '')`)
	eval(`(document.querySelector('main table a') && document.querySelector('main table a').click(), '')`)
	waitFor("the ended job's details", func() bool {
		return eval(`String(document.querySelector('#job-state') && document.querySelector('#job-state').className)`) == "badge ended"
	})
	if eval(`String(!!document.querySelector('#job-extend'))`) != "false" {
		t.Fatal("an ended job has an Extend button")
	}
}
