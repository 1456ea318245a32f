package baton

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

type transport struct {
	url    string
	token  string
	client *http.Client
}

// callWith is call with more headers, and the default timeout.
func (t *transport) callWith(ctx context.Context, method, path string, body, out interface{}, headers map[string]string) (int, error) {
	return t.send(ctx, method, path, body, out, 0, headers)
}

// call sends one request and decodes a 2xx answer into out; other answers are *Error.
func (t *transport) call(ctx context.Context, method, path string, body, out interface{}, timeout time.Duration) (int, error) {
	return t.send(ctx, method, path, body, out, timeout, nil)
}

func (t *transport) send(ctx context.Context, method, path string, body, out interface{}, timeout time.Duration, headers map[string]string) (int, error) {
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		reader = bytes.NewReader(data)
	}
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	request, err := http.NewRequestWithContext(ctx, method, t.url+path, reader)
	if err != nil {
		return 0, err
	}
	request.Header.Set("Content-Type", "application/json")
	if t.token != "" {
		request.Header.Set("Authorization", "Bearer "+t.token)
	}
	for name, value := range headers {
		request.Header.Set(name, value)
	}
	answer, err := t.client.Do(request)
	if err != nil {
		return 0, unreachable(t.url, err)
	}
	defer answer.Body.Close()
	data, err := io.ReadAll(answer.Body)
	if err != nil {
		return 0, unreachable(t.url, err)
	}
	if answer.StatusCode >= 300 {
		var failed struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.Unmarshal(data, &failed)
		e := &Error{Code: failed.Error.Code, Message: failed.Error.Message, Status: answer.StatusCode}
		if e.Code == "" {
			e.Code = "error"
		}
		if e.Message == "" {
			e.Message = fmt.Sprintf("HTTP %d", answer.StatusCode)
		}
		return answer.StatusCode, e
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return answer.StatusCode, fmt.Errorf("baton: unreadable answer: %w", err)
		}
	}
	return answer.StatusCode, nil
}

// segment is a key as one path segment: its "/" sent as "%2F".
func segment(key string) string { return url.PathEscape(key) }

// duration is a duration as the server takes it.
func duration(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }
