package baton

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Turn is a held turn, renewed by a goroutine until released.
type Turn struct {
	*lease
	// Slot and Slots: on a pool, the slots this turn was given.
	Slot  string
	Slots []string
	path  string
}

// lease is what a turn and a job's run share: the ticket, its fence, the renewing goroutine.
type lease struct {
	// Key, ID and Token name the ticket; Token is its secret.
	Key, ID, Token string
	// Fence rises with every grant of the key: hand it to what the work changes.
	Fence uint64

	transport *transport
	renewPath string
	ctx       context.Context
	cancel    context.CancelFunc
	stop      chan struct{}
	done      chan struct{}

	mu          sync.Mutex
	bound       time.Time
	lease       time.Duration
	renewedSent time.Time
	lost        bool
	stopAsked   string
	ended       bool
}

// counted is what a grant or a renewal says of its lease.
type counted struct {
	LeaseMs         int64   `json:"lease_ms"`
	StartedBeforeMs int64   `json:"started_before_ms"`
	MarginMs        int64   `json:"margin_ms"`
	RenewFirst      bool    `json:"renew_first"`
	StopAsked       *string `json:"stop_asked"`
}

type grant struct {
	counted
	ID       string   `json:"id"`
	Token    string   `json:"token"`
	Fence    uint64   `json:"fence"`
	Slot     *string  `json:"slot"`
	Slots    []string `json:"slots"`
	Position *int     `json:"position"`
}

// Turn waits for a turn at key. ctx bounds the wait (the server waits; a 202 is asked again
// with the ticket), not the turn: the turn lasts until Release, or until it is lost, which
// cancels t.Context().
//
// The ticket is of this client's making: a request that got no answer (or a server that no
// longer keeps the wait) is sent again as first asked, for up to 30 s, and the server takes it
// up as the same ticket, never a second one.
func (c *Client) Turn(ctx context.Context, key string, options ...TurnOption) (*Turn, error) {
	id, token, err := newTicket()
	if err != nil {
		return nil, err
	}
	ask := map[string]interface{}{"ttl": duration(30 * time.Second), "id": id, "token": token}
	for _, option := range options {
		option(ask)
	}
	path := "/v1/turns/" + segment(key)
	var body interface{} = ask
	giveUp := time.Now().Add(30 * time.Second)
	reached := false
	for {
		sent := time.Now()
		var g grant
		status, err := c.transport.call(ctx, "POST", path, body, &g, 0)
		var e *Error
		if errors.As(err, &e) {
			// A server never reached is a wrong URL or a server not started: said at once.
			// One that answered before and refuses now is restarting: asked again.
			refusedFirst := e.Code == "unreachable" && !reached
			again := (e.Transient() && !refusedFirst) || e.Code == "no_such_wait"
			reached = reached || e.Status != 0
			if again && time.Now().Before(giveUp) {
				body = ask
				time.Sleep(200 * time.Millisecond)
				continue
			}
		}
		if err != nil {
			return nil, err
		}
		reached = true
		if status == 202 {
			body = map[string]string{"resume": g.Token}
			continue
		}
		return c.hold(ctx, key, path, &g, sent)
	}
}

// newTicket makes a ticket's id and secret token.
func newTicket() (string, string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", "", fmt.Errorf("baton: no randomness for a ticket: %w", err)
	}
	return "t-" + hex.EncodeToString(b[:8]), hex.EncodeToString(b[8:]), nil
}

// hold makes the granted turn, renewed first if it came after a wait, and starts renewing it.
func (c *Client) hold(ctx context.Context, key, path string, g *grant, sent time.Time) (*Turn, error) {
	t := &Turn{lease: newLease(c.transport, key, path+"/renew", g), Slots: g.Slots, path: path}
	if g.Slot != nil {
		t.Slot = *g.Slot
	}
	if err := t.start(ctx, g, sent); err != nil {
		if errors.Is(err, ErrLost) {
			_ = t.End(ctx, "cancelled")
		}
		return nil, err
	}
	return t, nil
}

func newLease(tr *transport, key, renewPath string, g *grant) *lease {
	l := &lease{Key: key, ID: g.ID, Token: g.Token, Fence: g.Fence, transport: tr,
		renewPath: renewPath, stop: make(chan struct{}), done: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	return l
}

// start takes a grant's answer: renews first when it says so, checks the bound, and starts
// the renewing goroutine. A lease already past its bound is ErrLost.
func (t *lease) start(ctx context.Context, g *grant, sent time.Time) error {
	if g.RenewFirst {
		if err := t.Renew(ctx); err != nil {
			t.cancel()
			return err
		}
	} else {
		t.count(&g.counted, sent)
	}
	if !t.Holds() {
		t.mu.Lock()
		t.lost = true
		t.mu.Unlock()
		t.cancel()
		return &Error{Code: "lost", Status: 409,
			Message: fmt.Sprintf("%s: the lease ran out before its answer could be used", t.Key)}
	}
	go t.keep()
	return nil
}

// count sets the bound by the one rule, from an answer to a request sent at sent.
func (t *lease) count(c *counted, sent time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	usable := time.Duration(c.LeaseMs-c.StartedBeforeMs-c.MarginMs) * time.Millisecond
	t.bound = sent.Add(usable)
	t.lease = time.Duration(c.LeaseMs) * time.Millisecond
	t.renewedSent = sent
	if c.StopAsked != nil {
		t.stopAsked = *c.StopAsked
	}
}

// Context is cancelled when the turn is lost or released: stop the work.
func (t *lease) Context() context.Context { return t.ctx }

// Holds says whether the lease may still be relied on now.
func (t *lease) Holds() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.lost && time.Now().Before(t.bound)
}

// StopAsked names who asked this holder to stop (CancelRunning), or is "".
func (t *lease) StopAsked() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stopAsked
}

// Renew renews the lease now (the turn's goroutine does this by itself).
func (t *lease) Renew(ctx context.Context) error {
	sent := time.Now()
	t.mu.Lock()
	left := 30 * time.Second
	if !t.bound.IsZero() {
		left = t.bound.Sub(sent)
	}
	t.mu.Unlock()
	if left < 10*time.Millisecond {
		left = 10 * time.Millisecond
	}
	var c counted
	body := map[string]string{"token": t.Token}
	if _, err := t.transport.call(ctx, "POST", t.renewPath, body, &c, left); err != nil {
		return err
	}
	t.count(&c, sent)
	return nil
}

// keep renews a third of the way into the lease, and cancels the context at the bound.
func (t *lease) keep() {
	defer close(t.done)
	for {
		t.mu.Lock()
		bound, due := t.bound, t.renewedSent.Add(t.lease/3)
		t.mu.Unlock()
		if !time.Now().Before(bound) {
			t.lose()
			return
		}
		next := due
		if bound.Before(next) {
			next = bound
		}
		select {
		case <-t.stop:
			return
		case <-time.After(time.Until(next)):
		}
		if !time.Now().Before(bound) {
			t.lose()
			return
		}
		if time.Now().Before(due) {
			continue
		}
		if !t.renewOnce(bound) {
			return
		}
	}
}

// renewOnce renews; false when the turn is lost. A renewal that could not land is tried
// again soon while the lease stands.
func (t *lease) renewOnce(bound time.Time) bool {
	renewed := make(chan error, 1)
	go func() { renewed <- t.Renew(context.Background()) }()
	var err error
	select {
	case err = <-renewed:
	case <-time.After(time.Until(bound)):
		// The bound passed while the renewal was under way.
		t.lose()
		return false
	}
	var e *Error
	if err != nil && (!errors.As(err, &e) || !e.Transient()) {
		t.lose()
		return false
	}
	if err != nil {
		t.mu.Lock()
		retry := time.Until(t.bound) / 4
		if retry > time.Second {
			retry = time.Second
		}
		t.renewedSent = time.Now().Add(-t.lease / 3).Add(retry)
		t.mu.Unlock()
	}
	return true
}

func (t *lease) lose() {
	t.mu.Lock()
	t.lost = true
	t.mu.Unlock()
	t.cancel()
}

// Release ends the turn as succeeded.
func (t *Turn) Release(ctx context.Context) error { return t.End(ctx, "succeeded") }

// End ends the turn: "succeeded", "failed" or "cancelled". A lost turn sends nothing.
func (t *Turn) End(ctx context.Context, outcome string) error {
	lost, first := t.finish()
	if !first || (lost && outcome != "cancelled") {
		return nil
	}
	defer t.cancel()
	body := map[string]string{"token": t.Token, "outcome": outcome}
	_, err := t.transport.call(ctx, "DELETE", t.path, body, nil, 0)
	if errors.Is(err, ErrLost) {
		return nil
	}
	return err
}

// finish stops the renewals once: whether the lease was lost, and whether this was the first
// call.
func (t *lease) finish() (lost, first bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return t.lost, false
	}
	t.ended = true
	close(t.stop)
	return t.lost, true
}

// Check asks the server whether this turn's fence still holds the key.
func (t *Turn) Check(ctx context.Context, minLeft time.Duration) (*Checked, error) {
	c := &Client{transport: t.transport}
	return c.Check(ctx, t.Key, t.Fence, minLeft)
}
