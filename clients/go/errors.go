package baton

import (
	"errors"
	"fmt"
	"syscall"
)

// Error is an error answered by baton serve, or the server could not be reached (Status 0).
// Code is the API's stable word: "timed_out", "superseded", "cancelled", "lost",
// "bad_request"; "unreachable" (nothing listens at the URL), "no_answer" (sent, never
// answered), ...
type Error struct {
	Code    string
	Message string
	Status  int
}

func (e *Error) Error() string { return e.Message }

// Is matches an error by its code, so that errors.Is(err, baton.ErrLost) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Status == 0 && t.Message == "" && t.Code == e.Code
}

// Transient says whether trying again may help: no answer, or the store was unavailable.
func (e *Error) Transient() bool {
	return e.Status == 0 || (e.Status == 503 && e.Code != "store_unusable")
}

// The errors a turn ends with, by the names of baton's exit codes; compare with errors.Is.
var (
	// ErrTimedOut: the wait ran out (baton exits 75); the ticket was withdrawn.
	ErrTimedOut = &Error{Code: "timed_out"}
	// ErrSuperseded: a newer ticket superseded this one while queued (exit 76).
	ErrSuperseded = &Error{Code: "superseded"}
	// ErrCancelled: the ticket was cancelled (exit 77).
	ErrCancelled = &Error{Code: "cancelled"}
	// ErrLost: the lease ran out before a renewal landed (exit 78): stop the work.
	ErrLost = &Error{Code: "lost"}
)

// unreachable is a request that got no answer: "unreachable" when nothing listens at url (it
// was never sent), "no_answer" otherwise (it may have been).
func unreachable(url string, err error) *Error {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return &Error{Code: "unreachable", Message: fmt.Sprintf(
			"%s: nothing listens there (%v): is baton serve running, and is the URL right?", url, err)}
	}
	return &Error{Code: "no_answer", Message: fmt.Sprintf("%s: no answer: %v", url, err)}
}
