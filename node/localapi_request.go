package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// What every handler of the local API reads a request and writes an answer with: the body
// decoder, the parsing of path and query values, the error-to-status mapping and the
// writers of answers.

// decodeBody reads a JSON request body of at most limit bytes into v; a body that is too
// large, malformed or names an unknown field is a 400.
func decodeBody(r *http.Request, limit int64, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return api.Invalid(fmt.Errorf("request body: %w", err))
	}
	return nil
}

// jobID is the {id} of a job route.
func jobID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !protocol.ValidJobID(id) {
		return "", api.Invalid(errors.New("job ID: 16 lower-case hex digits"))
	}
	return id, nil
}

// applicationID is the {id} of a coordinator's application route.
func applicationID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !protocol.ValidApplicationID(id) {
		return "", api.Invalid(fmt.Errorf("application ID %q: 12 lower-case hex digits", id))
	}
	return id, nil
}

// parseDay reads a date (2006-01-02) or an RFC 3339 time.
func parseDay(s string) (time.Time, error) {
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	return time.Parse(time.RFC3339, s)
}

// errorCode maps an error to its HTTP status: the kinds of node/api, and the ledger's
// "not found".
func errorCode(err error) int {
	code := api.HTTPStatus(err)
	if code == http.StatusInternalServerError && errors.Is(err, ledger.ErrNotFound) {
		return http.StatusNotFound
	}
	return code
}

// writeError answers {"error": "..."} with the error's status, and returns the status.
func writeError(w http.ResponseWriter, err error) int {
	code := errorCode(err)
	writeJSON(w, code, map[string]string{"error": err.Error()})
	return code
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// encodeProgress writes one progress line of POST /v1/bench/run.
func encodeProgress(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// flushWriter flushes after every write, so that a followed log reaches the client as it
// is written.
type flushWriter struct{ w http.ResponseWriter }

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if fl, ok := f.w.(http.Flusher); ok {
		fl.Flush()
	}
	return n, err
}

// countingWriter counts what a stream wrote: an error after its first byte can no longer
// be answered as JSON.
type countingWriter struct {
	http.ResponseWriter
	n int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += len(p)
	return c.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection (a job tunnel's upgrade
// hijacks it).
func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (c *countingWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
