package baton

import (
	"context"
	"strconv"
	"time"
)

// Value is a shared value as read.
type Value struct {
	Name    string  `json:"name"`
	Value   string  `json:"value"`
	Version uint64  `json:"version"`
	JSON    bool    `json:"json"`
	Context string  `json:"context"`
	Fence   *uint64 `json:"fence"`
}

// ErrPreconditionFailed: the value's version was not the one given, or it existed (IfAbsent).
// ErrStaleFence: a higher fence already wrote it. Nothing was written either way.
var (
	ErrPreconditionFailed = &Error{Code: "precondition_failed"}
	ErrStaleFence         = &Error{Code: "stale_fence"}
)

// Values are the shared values: c.Values().Get, Set, Delete.
type Values struct{ transport *transport }

// Values gives the shared values.
func (c *Client) Values() Values { return Values{c.transport} }

// SetOption is a condition or a setting of a write.
type SetOption func(map[string]interface{}, map[string]string)

// IfVersion writes only while the version is still v.
func IfVersion(v uint64) SetOption {
	return func(_ map[string]interface{}, h map[string]string) {
		h["If-Match"] = strconv.Quote(strconv.FormatUint(v, 10))
	}
}

// IfAbsent writes only if there is no value.
func IfAbsent() SetOption {
	return func(_ map[string]interface{}, h map[string]string) { h["If-None-Match"] = "*" }
}

// Fenced refuses the write below the fence that last wrote the value.
func Fenced(fence uint64) SetOption {
	return func(_ map[string]interface{}, h map[string]string) {
		h["Baton-Fence"] = strconv.FormatUint(fence, 10)
	}
}

// ValueTTL makes the value expire.
func ValueTTL(d time.Duration) SetOption {
	return func(b map[string]interface{}, _ map[string]string) { b["ttl"] = duration(d) }
}

// Get reads a value; nil when there is none.
func (v Values) Get(ctx context.Context, name string) (*Value, error) {
	var value Value
	_, err := v.transport.call(ctx, "GET", "/v1/values/"+segment(name), nil, &value, 0)
	if e, ok := err.(*Error); ok && e.Code == "missing" {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &value, nil
}

// Set writes a value; its new version.
func (v Values) Set(ctx context.Context, name, value string, options ...SetOption) (uint64, error) {
	body, headers := map[string]interface{}{"value": value}, map[string]string{}
	for _, option := range options {
		option(body, headers)
	}
	var written struct {
		Version uint64 `json:"version"`
	}
	_, err := v.transport.callWith(ctx, "PUT", "/v1/values/"+segment(name), body, &written, headers)
	return written.Version, err
}

// Delete deletes a value (an admin token's).
func (v Values) Delete(ctx context.Context, name string, options ...SetOption) error {
	headers := map[string]string{}
	for _, option := range options {
		option(map[string]interface{}{}, headers)
	}
	_, err := v.transport.callWith(ctx, "DELETE", "/v1/values/"+segment(name), nil, nil, headers)
	return err
}
