package api

import (
	"errors"
	"net/http"
)

// The kinds of failure a caller of the API can tell apart. Domain code wraps its errors in
// one of them (with %w, or with Invalid and Conflict, which keep the message as it is); only
// the API layer turns a kind into an HTTP status (HTTPStatus).
var (
	// ErrInvalid: the request is wrong and asking again will not help (400).
	ErrInvalid = errors.New("invalid request")
	// ErrNotFound: what the request names does not exist (404).
	ErrNotFound = errors.New("not found")
	// ErrConflict: the request does not fit the current state (409).
	ErrConflict = errors.New("conflict")
	// ErrWrongRole: the request needs another role than the node's (409).
	ErrWrongRole = errors.New("not available in this node's role")
	// ErrRateLimited: too many requests from one peer; ask later (429).
	ErrRateLimited = errors.New("rate limited")
	// ErrForbidden: the caller is known but may not do this (403).
	ErrForbidden = errors.New("forbidden")
)

// kindError gives err a kind without changing its message.
type kindError struct{ kind, err error }

func (e kindError) Error() string   { return e.err.Error() }
func (e kindError) Unwrap() []error { return []error{e.kind, e.err} }

// Invalid marks err as the caller's mistake (ErrInvalid), keeping its message.
func Invalid(err error) error { return kindError{ErrInvalid, err} }

// Conflict marks err as a clash with the current state (ErrConflict), keeping its message.
func Conflict(err error) error { return kindError{ErrConflict, err} }

// Kind marks err with any of the kinds above, keeping its message.
func Kind(kind, err error) error { return kindError{kind, err} }

// HTTPStatus is the HTTP status of an error of one of the kinds above; 500 for any other.
func HTTPStatus(err error) int {
	switch {
	case errors.Is(err, ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrConflict), errors.Is(err, ErrWrongRole):
		return http.StatusConflict
	case errors.Is(err, ErrRateLimited):
		return http.StatusTooManyRequests
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden
	default:
		return http.StatusInternalServerError
	}
}
