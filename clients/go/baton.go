// Package baton is the Go client of baton serve: fair, fenced turns at keys.
//
//	c, err := baton.New("http://127.0.0.1:8080") // the token: BATON_TOKEN
//	t, err := c.Turn(ctx, "deploy/prod", baton.TTL(30*time.Second))
//	if err != nil { ... }
//	defer t.Release(ctx)
//	deploy(t.Context(), t.Fence) // t.Context() is cancelled when the lease is lost
//
// The one rule (the same in every baton client): a lease is usable until the moment, on this
// process's clock, before the request that set it was sent, plus lease_ms, less the server's
// started_before_ms, less margin_ms. A grant that came after a wait says renew_first: it is
// renewed before it is used, and counted from before that renewal. A goroutine renews a third
// of the way into the lease; when the bound passes without a renewal landing, the turn's
// context is cancelled and the work must stop.
package baton

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
)

// Version is this client's version, baton's own.
const Version = "0.1.0"

// Client talks to one baton serve.
type Client struct {
	transport *transport
}

// Option changes a Client.
type Option func(*Client)

// WithToken sets the bearer token (default: BATON_TOKEN).
func WithToken(token string) Option { return func(c *Client) { c.transport.token = token } }

// WithHTTPClient sets the HTTP client requests go through.
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.transport.client = h } }

// New is a client of the server at url ("" means BATON_URL).
func New(url string, options ...Option) (*Client, error) {
	if url == "" {
		url = os.Getenv("BATON_URL")
	}
	if url == "" {
		return nil, errors.New("baton: give the server's URL, or set BATON_URL (http://HOST:PORT)")
	}
	c := &Client{transport: &transport{
		url:    strings.TrimRight(url, "/"),
		token:  os.Getenv("BATON_TOKEN"),
		client: &http.Client{},
	}}
	for _, option := range options {
		option(c)
	}
	return c, nil
}

// TurnOption is one of baton acquire's flags.
type TurnOption func(map[string]interface{})

// TTL is the lease (default 30s).
func TTL(d time.Duration) TurnOption { return set("ttl", duration(d)) }

// Timeout bounds the wait (default: as long as it takes).
func Timeout(d time.Duration) TurnOption { return set("timeout", duration(d)) }

// Limit is the key's limit (1: a mutex).
func Limit(n int) TurnOption { return set("limit", n) }

// Shared takes a shared turn.
func Shared() TurnOption { return set("shared", true) }

// Order is the sort value: tickets with one go first.
func Order(value string) TurnOption { return set("order", value) }

// Supersede cancels queued tickets that sort before this one.
func Supersede() TurnOption { return set("supersede", true) }

// Keep makes the ticket immune to a later Supersede.
func Keep() TurnOption { return set("keep", true) }

// CancelRunning asks the holders to stop.
func CancelRunning() TurnOption { return set("cancel_running", true) }

// Context says who is asking and why (shown to others).
func Context(text string) TurnOption { return set("context", text) }

// Slots makes the key a pool of these named slots.
func Slots(names ...string) TurnOption { return set("slots", names) }

// Slot asks for this slot of the pool only.
func Slot(name string) TurnOption { return set("slot", name) }

// Count asks for this many slots at once.
func Count(n int) TurnOption { return set("count", n) }

func set(name string, value interface{}) TurnOption {
	return func(ask map[string]interface{}) { ask[name] = value }
}

// Checked is what a fence check found (baton check).
type Checked struct {
	Key         string  `json:"key"`
	Fence       uint64  `json:"fence"`
	Holds       bool    `json:"holds"`
	StopAsked   *string `json:"stop_asked"`
	LeaseLeftMs *uint64 `json:"lease_left_ms"`
	Why         string  `json:"why"`
}

// Check asks whether the turn with fence still holds key, with at least minLeft of its lease
// left (0: any).
func (c *Client) Check(ctx context.Context, key string, fence uint64, minLeft time.Duration) (*Checked, error) {
	query := fmt.Sprintf("?fence=%d", fence)
	if minLeft > 0 {
		query += "&min_left=" + duration(minLeft)
	}
	var checked Checked
	_, err := c.transport.call(ctx, "GET", "/v1/turns/"+segment(key)+"/check"+query, nil, &checked, 0)
	if err != nil {
		return nil, err
	}
	return &checked, nil
}
