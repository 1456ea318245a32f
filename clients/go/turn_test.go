// The Go client against a real baton serve (BATON_URL), started by the test command over
// SQLite and PostgreSQL: exclusion with fences across processes, a holder killed and taken
// over after its lease, a lost lease stopping the work, timeouts, long waits.
//
//	BATON_URL=http://127.0.0.1:PORT go test ./...
package baton

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestMain runs a helper process's part when the test binary is started as one.
func TestMain(m *testing.M) {
	switch os.Getenv("BATON_TEST_HELPER") {
	case "holder":
		os.Exit(holder(os.Args[len(os.Args)-3:]))
	case "sleeper":
		os.Exit(sleeper(os.Args[len(os.Args)-2:]))
	case "duplicate":
		os.Exit(duplicate(os.Args[len(os.Args)-2:]))
	}
	os.Exit(m.Run())
}

func holder(args []string) int {
	key, log := args[0], args[1]
	turns, _ := strconv.Atoi(args[2])
	c, err := New("")
	if err != nil {
		return 2
	}
	ctx := context.Background()
	for i := 0; i < turns; i++ {
		t, err := c.Turn(ctx, key, TTL(10*time.Second), Context(fmt.Sprintf("pid %d", os.Getpid())))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		appendLine(log, fmt.Sprintf("start %d", t.Fence))
		time.Sleep(50 * time.Millisecond)
		appendLine(log, fmt.Sprintf("end %d", t.Fence))
		if err := t.Release(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

func sleeper(args []string) int {
	c, err := New("")
	if err != nil {
		return 2
	}
	t, err := c.Turn(context.Background(), args[0], TTL(2*time.Second))
	if err != nil {
		return 1
	}
	_ = os.WriteFile(args[1], []byte(strconv.FormatUint(t.Fence, 10)), 0o600)
	time.Sleep(2 * time.Minute)
	return 0
}

func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line + "\n"); err != nil {
		panic(err)
	}
}

func server(t *testing.T) string {
	url := os.Getenv("BATON_URL")
	if url == "" {
		t.Skip("BATON_URL is not set: no server to test against")
	}
	return url
}

func freshKey(name string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "go/" + name + "/" + hex.EncodeToString(b)
}

func helper(t *testing.T, role string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$"}, args...)...)
	cmd.Env = append(os.Environ(), "BATON_TEST_HELPER="+role)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

func mustClient(t *testing.T, url string) *Client {
	c, err := New(url)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestTurnsExcludeEachOtherAcrossProcessesAndFencesRise(t *testing.T) {
	server(t)
	key, log := freshKey("exclusion"), filepath.Join(t.TempDir(), "log")
	var workers []*exec.Cmd
	for i := 0; i < 4; i++ {
		workers = append(workers, helper(t, "holder", key, log, "3"))
	}
	for _, w := range workers {
		if err := w.Wait(); err != nil {
			t.Fatalf("a holder failed: %v", err)
		}
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 24 {
		t.Fatalf("%d lines, not 24", len(lines))
	}
	var last uint64
	for i := 0; i < len(lines); i += 2 {
		start, end := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if start[0] != "start" || end[0] != "end" || start[1] != end[1] {
			t.Fatalf("turns overlap: %q then %q", lines[i], lines[i+1])
		}
		fence, _ := strconv.ParseUint(start[1], 10, 64)
		if fence <= last {
			t.Fatalf("fence %d after %d: fences must rise", fence, last)
		}
		last = fence
	}
}

func TestAHolderKilledIsTakenOverAfterItsLease(t *testing.T) {
	url := server(t)
	key, held := freshKey("killed"), filepath.Join(t.TempDir(), "held")
	sleeper := helper(t, "sleeper", key, held)
	deadline := time.Now().Add(time.Minute)
	for {
		if data, err := os.ReadFile(held); err == nil && len(data) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the holder never got its turn")
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = sleeper.Process.Signal(syscall.SIGKILL)
	_ = sleeper.Wait()
	started := time.Now()
	ctx := context.Background()
	next, err := mustClient(t, url).Turn(ctx, key, TTL(10*time.Second), Timeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	data, _ := os.ReadFile(held)
	killed, _ := strconv.ParseUint(string(data), 10, 64)
	if next.Fence <= killed {
		t.Fatalf("fence %d is not above the killed holder's %d", next.Fence, killed)
	}
	if time.Since(started) > 20*time.Second {
		t.Fatalf("taken over %v after the kill", time.Since(started))
	}
}

// blackHole forwards to upstream until cut: then it takes bytes and answers nothing.
type blackHole struct {
	listener net.Listener
	cut      atomic.Bool
	// loseReplies answers to drop: the request reached the server, the client's connection is
	// closed.
	loseReplies atomic.Int32
	// delayMs holds every answer back this long (a late reply).
	delayMs atomic.Int64
	mu      sync.Mutex
	conns   []net.Conn
}

func newBlackHole(t *testing.T, upstream string) *blackHole {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackHole{listener: l}
	target := strings.TrimPrefix(upstream, "http://")
	go func() {
		for {
			client, err := l.Accept()
			if err != nil {
				return
			}
			b.track(client)
			if b.cut.Load() {
				go io.Copy(io.Discard, client)
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			b.track(up)
			go b.pipe(client, up)
			go b.answer(up, client)
		}
	}()
	t.Cleanup(b.close)
	return b
}

func (b *blackHole) track(c net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.conns = append(b.conns, c)
}

func (b *blackHole) pipe(from, to net.Conn) {
	buf := make([]byte, 65536)
	for {
		n, err := from.Read(buf)
		if err != nil || b.cut.Load() {
			if b.cut.Load() {
				_, _ = io.Copy(io.Discard, from)
			}
			return
		}
		if _, err := to.Write(buf[:n]); err != nil {
			return
		}
	}
}

// answer passes the server's answers on, but drops one whole while loseReplies says so.
func (b *blackHole) answer(up, client net.Conn) {
	if b.loseReplies.Load() > 0 {
		buf := make([]byte, 65536)
		if n, err := up.Read(buf); n > 0 || err == nil {
			b.loseReplies.Add(-1)
			up.Close()
			client.Close()
			return
		}
	}
	if b.delayMs.Load() > 0 {
		b.late(up, client)
		return
	}
	b.pipe(up, client)
}

// late passes the server's answers on, each held back by delayMs.
func (b *blackHole) late(up, client net.Conn) {
	buf := make([]byte, 65536)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			time.Sleep(time.Duration(b.delayMs.Load()) * time.Millisecond)
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			client.Close()
			return
		}
	}
}

func (b *blackHole) close() {
	b.listener.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.conns {
		c.Close()
	}
}

func TestALeaseCutOffFromTheServerIsLostBeforeAnyoneElseHolds(t *testing.T) {
	url := server(t)
	key, hole := freshKey("lost"), newBlackHole(t, url)
	ctx := context.Background()
	cutOff, err := mustClient(t, "http://"+hole.listener.Addr().String()).Turn(ctx, key, TTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	hole.cut.Store(true)
	select {
	case <-cutOff.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the turn was not lost once renewals could not land")
	}
	lostAt := time.Now()
	next, err := mustClient(t, url).Turn(ctx, key, TTL(10*time.Second), Timeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	grantedAt := time.Now()
	defer next.Release(ctx)
	if next.Fence <= cutOff.Fence {
		t.Fatalf("fence %d is not above %d", next.Fence, cutOff.Fence)
	}
	if grantedAt.Before(lostAt) {
		t.Fatal("the next holder began before the work stopped")
	}
	if err := cutOff.Release(ctx); err != nil {
		t.Fatalf("a lost turn's release sends nothing: %v", err)
	}
}

func TestALostAnswerIsAskedAgainAsTheSameTicket(t *testing.T) {
	url := server(t)
	key, lossy, ctx := freshKey("lost-answer"), newBlackHole(t, url), context.Background()
	lossy.loseReplies.Store(1)
	c := mustClient(t, url)
	held, err := mustClient(t, "http://"+lossy.listener.Addr().String()).Turn(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if lossy.loseReplies.Load() != 0 {
		t.Fatal("the first answer was not lost")
	}
	if checked, err := c.Check(ctx, key, held.Fence, 0); err != nil || !checked.Holds {
		t.Fatalf("it holds: %+v %v", checked, err)
	}
	if _, err := c.Turn(ctx, key, Timeout(300*time.Millisecond)); !errors.Is(err, ErrTimedOut) {
		t.Fatalf("one holder only: %v", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// No second ticket: a ghost would hold the key for its 30 s lease.
	next, err := c.Turn(ctx, key, Timeout(2*time.Second))
	if err != nil {
		t.Fatalf("the key is free: %v", err)
	}
	_ = next.Release(ctx)
}

func TestAGrantAnsweredAfterItsLeaseIsLostNeverUsed(t *testing.T) {
	url := server(t)
	key, late, ctx := freshKey("late"), newBlackHole(t, url), context.Background()
	late.delayMs.Store(2500)
	started := time.Now()
	_, err := mustClient(t, "http://"+late.listener.Addr().String()).Turn(ctx, key, TTL(2*time.Second))
	if !errors.Is(err, ErrLost) {
		t.Fatalf("want ErrLost, got %v", err)
	}
	if time.Since(started) < 2*time.Second {
		t.Fatal("the answer came before the lease ran out")
	}
	// The key is free for the next: the late grant was never used, only given back.
	next, err := mustClient(t, url).Turn(ctx, key, TTL(10*time.Second), Timeout(time.Second))
	if err != nil {
		t.Fatalf("the key is free: %v", err)
	}
	_ = next.Release(ctx)
}

func TestAWaitPastItsTimeoutIsErrTimedOut(t *testing.T) {
	c, ctx, key := mustClient(t, server(t)), context.Background(), freshKey("timeout")
	holder, err := c.Turn(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)
	_, err = c.Turn(ctx, key, Timeout(500*time.Millisecond))
	var e *Error
	if !errors.Is(err, ErrTimedOut) || !errors.As(err, &e) || e.Status != 408 {
		t.Fatalf("want ErrTimedOut (408), got %v", err)
	}
}

func TestALongWaitResumesAndIsRenewedBeforeUse(t *testing.T) {
	c, ctx, key := mustClient(t, server(t)), context.Background(), freshKey("wait")
	first, err := c.Turn(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Turn, 1)
	go func() {
		second, err := c.Turn(ctx, key)
		if err != nil {
			t.Error(err)
		}
		got <- second
	}()
	time.Sleep(2500 * time.Millisecond) // past the test server's --turn-wait of 1s
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second := <-got
	if second == nil {
		return
	}
	defer second.Release(ctx)
	if !second.Holds() || second.Fence <= first.Fence {
		t.Fatalf("the second turn holds with a higher fence: %v %d %d", second.Holds(), second.Fence, first.Fence)
	}
	checked, err := second.Check(ctx, time.Second)
	if err != nil || !checked.Holds {
		t.Fatalf("the check says it holds: %+v %v", checked, err)
	}
	if first.Context().Err() == nil {
		t.Fatal("a released turn's context is cancelled")
	}
}

func TestBadInputSaysWhatToWrite(t *testing.T) {
	c := mustClient(t, server(t))
	_, err := c.Turn(context.Background(), freshKey("bad"), TTL(30*24*time.Hour))
	var e *Error
	if !errors.As(err, &e) || e.Status != 400 || !strings.Contains(e.Message, "ttl") {
		t.Fatalf("want a 400 naming ttl, got %v", err)
	}
	// A URL nothing listens on is said at once, not retried.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nowhere := "http://" + closed.Addr().String()
	closed.Close()
	started := time.Now()
	_, err = mustClient(t, nowhere).Turn(context.Background(), freshKey("nowhere"))
	if err == nil || !strings.Contains(err.Error(), "is baton serve running") {
		t.Fatalf("want the URL named, got %v", err)
	}
	if time.Since(started) > 5*time.Second {
		t.Fatalf("said after %v: it was retried", time.Since(started))
	}
}
