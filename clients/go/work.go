package baton

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// OnceOption is one of baton once's flags.
type OnceOption func(map[string]interface{})

// Seq makes the run step n of the key's sequence.
func Seq(n uint64) OnceOption { return func(a map[string]interface{}) { a["seq"] = n } }

// MaxAttempts is how many failed runs make the key dead (default 3).
func MaxAttempts(n int) OnceOption { return func(a map[string]interface{}) { a["max_attempts"] = n } }

// Retain is how long a success is remembered (default 7 days).
func Retain(d time.Duration) OnceOption {
	return func(a map[string]interface{}) { a["retain"] = duration(d) }
}

// OnceTTL is the run's lease (default 30s).
func OnceTTL(d time.Duration) OnceOption {
	return func(a map[string]interface{}) { a["ttl"] = duration(d) }
}

// Ran says what Once did: Ran, or the Verdict ("skipped": a success is remembered; "replay":
// the step is done) that left nothing to do.
type Ran struct {
	Verdict string
	Ran     bool
	Attempt int
}

// ErrDead is the error of a run-once key whose attempts are spent; ErrOutOfOrder of a step
// whose predecessor has not completed.
var (
	ErrDead       = &Error{Code: "dead"}
	ErrOutOfOrder = &Error{Code: "out_of_order"}
)

// Once runs fn holding the key's turn unless a run of it already succeeded on key (baton
// once): nil from fn records the success, an error spends an attempt and is returned.
// ErrDead and ErrOutOfOrder (errors.Is) when it may not run.
func (c *Client) Once(ctx context.Context, key string, fn func(*Turn) error, options ...OnceOption) (Ran, error) {
	ask := map[string]interface{}{"ttl": duration(30 * time.Second)}
	for _, option := range options {
		option(ask)
	}
	var body interface{} = ask
	for {
		sent := time.Now()
		var g struct {
			grant
			Verdict string `json:"verdict"`
			Attempt int    `json:"attempt"`
		}
		status, err := c.transport.call(ctx, "POST", "/v1/once/"+segment(key), body, &g, 0)
		if err != nil {
			return Ran{}, err
		}
		if status == 202 {
			body = map[string]string{"resume": g.Token}
			continue
		}
		if g.Verdict != "run" {
			return Ran{Verdict: g.Verdict}, nil
		}
		t, err := c.hold(ctx, key, "/v1/turns/"+segment(key), &g.grant, sent)
		if err != nil {
			return Ran{}, err
		}
		if err := fn(t); err != nil {
			_ = t.End(ctx, "failed")
			return Ran{Verdict: "run", Ran: true, Attempt: g.Attempt}, err
		}
		return Ran{Verdict: "run", Ran: true, Attempt: g.Attempt}, t.Release(ctx)
	}
}

// SubmitOption is one of baton submit's flags.
type SubmitOption func(map[string]interface{})

// JobID gives the job an id: a second submit with it changes nothing.
func JobID(id string) SubmitOption { return func(a map[string]interface{}) { a["id"] = id } }

// JobAttempts is how many failed runs make the job dead.
func JobAttempts(n int) SubmitOption {
	return func(a map[string]interface{}) { a["max_attempts"] = n }
}

// Backoff is the pause before the first retry; it doubles.
func Backoff(d time.Duration) SubmitOption {
	return func(a map[string]interface{}) { a["backoff"] = duration(d) }
}

// Delay keeps the job from running before this long after it is queued.
func Delay(d time.Duration) SubmitOption {
	return func(a map[string]interface{}) { a["delay"] = duration(d) }
}

// Submitted is what a submit did.
type Submitted struct {
	Key     string `json:"key"`
	ID      string `json:"id"`
	State   string `json:"state"`
	Already bool   `json:"already"`
}

// Submit queues a job for key with params (marshalled to JSON).
func (c *Client) Submit(ctx context.Context, key string, params interface{}, options ...SubmitOption) (*Submitted, error) {
	if params == nil {
		params = map[string]interface{}{}
	}
	ask := map[string]interface{}{"params": params}
	for _, option := range options {
		option(ask)
	}
	var s Submitted
	if _, err := c.transport.call(ctx, "POST", "/v1/jobs/"+segment(key), ask, &s, 0); err != nil {
		return nil, err
	}
	return &s, nil
}

// JobStanding is where a job stands, or how it ended.
type JobStanding struct {
	Key      string  `json:"key"`
	ID       string  `json:"id"`
	State    string  `json:"state"`
	Position *int    `json:"position"`
	Attempt  *int    `json:"attempt"`
	Reason   *string `json:"reason"`
}

// Job says where job id of key stands.
func (c *Client) Job(ctx context.Context, key, id string) (*JobStanding, error) {
	var s JobStanding
	_, err := c.transport.call(ctx, "GET", "/v1/jobs/"+segment(key)+"/"+segment(id), nil, &s, 0)
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// WaitJob waits for job id of key to end (baton wait), as long as ctx allows.
func (c *Client) WaitJob(ctx context.Context, key, id string) (*JobStanding, error) {
	for {
		var s JobStanding
		path := "/v1/jobs/" + segment(key) + "/" + segment(id) + "/wait?timeout=50s"
		status, err := c.transport.call(ctx, "GET", path, nil, &s, 0)
		if err != nil || status == 200 {
			return &s, err
		}
	}
}

// Run is a claimed run of a job, renewed by a goroutine until completed.
type Run struct {
	*lease
	// Params are the job's parameters, as submitted.
	Params json.RawMessage
	// Attempt is 1 for the first.
	Attempt int
	path    string
}

// Complete ends the run: "succeeded", "failed" (an attempt spent) or "released_back". A lost
// run sends nothing: it has lapsed, and the job runs again.
func (r *Run) Complete(ctx context.Context, result, why string) error {
	lost, first := r.finish()
	if lost || !first {
		return nil
	}
	defer r.cancel()
	body := map[string]string{"token": r.Token, "result": result}
	if why != "" {
		body["error"] = why
	}
	_, err := r.transport.call(ctx, "POST", r.path+"/complete", body, nil, 0)
	if errors.Is(err, ErrLost) {
		return nil
	}
	return err
}

// Claim claims the next ready job of keys (exact keys, and prefixes ending in "/"), waiting
// up to wait; nil when none came.
func (c *Client) Claim(ctx context.Context, keys []string, wait, ttl time.Duration) (*Run, error) {
	sent := time.Now()
	var g struct {
		grant
		Key     string          `json:"key"`
		Params  json.RawMessage `json:"params"`
		Attempt int             `json:"attempt"`
	}
	ask := map[string]interface{}{"keys": keys, "wait": duration(wait), "ttl": duration(ttl)}
	status, err := c.transport.call(ctx, "POST", "/v1/claims", ask, &g, wait+time.Minute)
	if err != nil || status == 204 {
		return nil, err
	}
	path := "/v1/jobs/" + segment(g.Key) + "/" + segment(g.ID)
	r := &Run{lease: newLease(c.transport, g.Key, path+"/renew", &g.grant),
		Params: g.Params, Attempt: g.Attempt, path: path}
	if err := r.start(ctx, &g.grant, sent); err != nil {
		return nil, err
	}
	return r, nil
}

// Work runs jobs of keys with handler until ctx ends (or max jobs ran, when max > 0): nil from
// handler completes the run as succeeded, an error as failed (retried after its backoff).
// handler gets the run's context, cancelled if its lease is lost. It returns how many ran.
func (c *Client) Work(ctx context.Context, keys []string, handler func(context.Context, *Run) error, max int) (int, error) {
	ran := 0
	for ctx.Err() == nil && (max <= 0 || ran < max) {
		r, err := c.Claim(ctx, keys, 20*time.Second, 30*time.Second)
		var e *Error
		switch {
		case errors.Is(err, ErrLost):
			continue
		case errors.As(err, &e) && e.Transient():
			time.Sleep(time.Second)
			continue
		case err != nil:
			return ran, err
		case r == nil:
			continue
		}
		ran++
		if err := handler(r.Context(), r); err != nil {
			_ = r.Complete(ctx, "failed", fmt.Sprint(err))
			continue
		}
		if err := r.Complete(ctx, "succeeded", ""); err != nil {
			return ran, err
		}
	}
	return ran, ctx.Err()
}
