package api

import (
	"fmt"

	"github.com/gpunex/gpunex/protocol"
)

// Types of the job routes: proposals, placement, a job's view.

// JobView is a job as the API shows it: the fields its provider reports on the job streams
// (protocol.JobStatus), and, for a job just placed by model, how it was placed.
type JobView struct {
	protocol.JobStatus
	// Placement is set in the answer of POST /v1/jobs to a request naming a model and no
	// provider or offer: which offer took the job and why, and which were tried before it.
	Placement *Placement `json:"placement,omitempty"`
	// Input is the upload of the job's input while it runs and a while after (input.go).
	Input *InputProgress `json:"input,omitempty"`
}

// Placement says how a job asked for by model found its provider: the offers matching the
// search, best merit first (see RankTerms), were proposed the job in turn until one took it.
type Placement struct {
	// Search is what was searched, in words ("model H100-80GB, region eu-west, 1 GPU or
	// more"); Matched how many offers matched it; Tries the most that were to be tried.
	Search  string `json:"search"`
	Matched int    `json:"matched"`
	Tries   int    `json:"tries"`
	// Chosen says which provider took the job and why, in words.
	Chosen string `json:"chosen"`
	// Attempts are the offers proposed to, in order: the last one took the job.
	Attempts []PlacementAttempt `json:"attempts"`
}

// PlacementAttempt is one offer a job was proposed to while it was placed.
type PlacementAttempt struct {
	// Rank is the offer's place in the search (1: the best merit).
	Rank      int     `json:"rank"`
	Offer     string  `json:"offer"`
	Provider  string  `json:"provider"`
	PriceUSDC string  `json:"price_usdc_per_gpu_hour"`
	Score     int     `json:"score"`
	Tier      string  `json:"tier"`
	Region    string  `json:"region"`
	Merit     float64 `json:"merit"`
	// Why says why the offer was ranked there, in words.
	Why string `json:"why"`
	// Outcome is "accepted" (the provider took the job), "refused" (it refused or
	// countered the proposal), "unreachable" (it did not answer) or "failed" (the job was
	// leased but did not start); Error says why when it is not accepted.
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
}

// Placement limits: how many offers POST /v1/jobs tries by default, and at most.
const (
	DefaultTries = 3
	MaxTries     = 10
)

// JobRequest is what a renter asks for (POST /v1/jobs).
type JobRequest struct {
	// Provider (a peer ID) or Offer (an offer ID, "<peer>/<MODEL>") names where to run.
	// Without either, Model places the job: the offers of that model matching Region,
	// Tier, Egress, MaxPrice and GPUs are proposed the job best merit first, until one
	// takes it or Tries of them were asked (0: DefaultTries; at most MaxTries).
	Provider string `json:"provider,omitempty"`
	Offer    string `json:"offer,omitempty"`
	Model    string `json:"model,omitempty"`
	Region   string `json:"region,omitempty"`
	Tier     string `json:"tier,omitempty"`
	Tries    int    `json:"tries,omitempty"`
	GPUs     int    `json:"gpus"`
	// MaxSeconds is the longest the job may run.
	MaxSeconds int64 `json:"max_seconds"`
	// MaxPrice in USDC per GPU-hour; empty takes the offer's price.
	MaxPrice string `json:"max_price_usdc,omitempty"`
	// Image (a registry reference) or ImageArchive (a path to an OCI archive on this
	// machine, streamed to the provider).
	Image        string   `json:"image,omitempty"`
	ImageArchive string   `json:"image_archive,omitempty"`
	Args         []string `json:"args,omitempty"`
	Env          []string `json:"env,omitempty"`
	Egress       bool     `json:"egress,omitempty"`
	// Inputs are absolute paths of files and folders on this machine, sent to the
	// provider before the job starts and read-only at /input/NAME (input.go).
	Inputs []string `json:"inputs,omitempty"`
	// Progress, when set, names this request's input hashing and upload for GET
	// /v1/uploads while the request runs: a random name of the caller's.
	Progress string `json:"progress,omitempty"`
	// Ports are the TCP ports the job serves its renter (gpunex job forward, the API's
	// /v1/jobs/ID/ports/PORT/); at most 16.
	Ports []int `json:"ports,omitempty"`
}

// Ordinal writes n as an English ordinal: 1st, 2nd, 3rd, 4th, 11th, 21st.
func Ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return fmt.Sprintf("%d%s", n, suffix)
}
