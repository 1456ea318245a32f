// Run once, jobs and shared values through a real baton serve (BATON_URL): one run of ten
// duplicate processes, attempts spent to dead, a worker running jobs with retries, values
// compared and swapped by racing writers, fences.
package baton

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func duplicate(args []string) int {
	key, log := args[0], args[1]
	c, err := New("")
	if err != nil {
		return 2
	}
	ran, err := c.Once(context.Background(), key, func(t *Turn) error {
		appendLine(log, fmt.Sprintf("ran %d", t.Fence))
		time.Sleep(300 * time.Millisecond)
		return nil
	}, OnceTTL(10*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	appendLine(log, "verdict "+ran.Verdict)
	return 0
}

func TestOfTenDuplicateProcessesOneRuns(t *testing.T) {
	url := server(t)
	key, log := freshKey("once"), filepath.Join(t.TempDir(), "log")
	var procs []*exec.Cmd
	for i := 0; i < 10; i++ {
		procs = append(procs, helper(t, "duplicate", key, log))
	}
	for _, p := range procs {
		if err := p.Wait(); err != nil {
			t.Fatalf("a duplicate failed: %v", err)
		}
	}
	data, _ := os.ReadFile(log)
	var ran, verdicts []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if strings.HasPrefix(line, "ran ") {
			ran = append(ran, line)
		} else {
			verdicts = append(verdicts, strings.TrimPrefix(line, "verdict "))
		}
	}
	sort.Strings(verdicts)
	want := append([]string{"run"}, strings.Split(strings.Repeat("skipped ", 9), " ")[:9]...)
	if len(ran) != 1 || strings.Join(verdicts, ",") != strings.Join(want, ",") {
		t.Fatalf("one run and nine skipped, got %v and %v", ran, verdicts)
	}
	later, err := mustClient(t, url).Once(context.Background(), key, func(*Turn) error { return nil })
	if err != nil || later.Verdict != "skipped" {
		t.Fatalf("a later duplicate skips: %+v %v", later, err)
	}
}

func TestFailedRunsSpendAttemptsUntilTheKeyIsDead(t *testing.T) {
	c, ctx, key := mustClient(t, server(t)), context.Background(), freshKey("dead")
	declined := errors.New("the card was declined")
	fail := func(*Turn) error { return declined }
	for i := 0; i < 2; i++ {
		if _, err := c.Once(ctx, key, fail, MaxAttempts(2)); !errors.Is(err, declined) {
			t.Fatalf("the work's error comes back: %v", err)
		}
	}
	if _, err := c.Once(ctx, key, fail, MaxAttempts(2)); !errors.Is(err, ErrDead) {
		t.Fatalf("want ErrDead, got %v", err)
	}
	_, err := c.Once(ctx, freshKey("steps"), func(*Turn) error { return nil }, Seq(2))
	if !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("want ErrOutOfOrder, got %v", err)
	}
}

func TestAWorkerRunsJobsRetryingFailures(t *testing.T) {
	c, ctx, key := mustClient(t, server(t)), context.Background(), freshKey("jobs")
	for n := 0; n < 3; n++ {
		_, err := c.Submit(ctx, key, map[string]int{"n": n}, JobID("job-"+strconv.Itoa(n)),
			JobAttempts(3), Backoff(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
	}
	var runs []string
	var fences []uint64
	ran, err := c.Work(ctx, []string{key}, func(_ context.Context, r *Run) error {
		var p struct{ N int }
		_ = json.Unmarshal(r.Params, &p)
		runs = append(runs, fmt.Sprintf("%d:%d", p.N, r.Attempt))
		fences = append(fences, r.Fence)
		if p.N == 1 && r.Attempt == 1 {
			return errors.New("flaky")
		}
		return nil
	}, 4)
	if err != nil || ran != 4 {
		t.Fatalf("four runs: %d %v", ran, err)
	}
	sort.Strings(runs)
	if strings.Join(runs, ",") != "0:1,1:1,1:2,2:1" {
		t.Fatalf("runs %v", runs)
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fences must rise: %v", fences)
		}
	}
	for n := 0; n < 3; n++ {
		s, err := c.Job(ctx, key, "job-"+strconv.Itoa(n))
		if err != nil || s.State != "succeeded" {
			t.Fatalf("job-%d: %+v %v", n, s, err)
		}
	}
	if s, err := c.WaitJob(ctx, key, "job-1"); err != nil || s.State != "succeeded" {
		t.Fatalf("wait: %+v %v", s, err)
	}
}

func TestValuesAreComparedAndSwappedByRacingWriters(t *testing.T) {
	c, ctx, name := mustClient(t, server(t)), context.Background(), freshKey("counter")
	values := c.Values()
	if v, err := values.Get(ctx, name); v != nil || err != nil {
		t.Fatalf("no value yet: %+v %v", v, err)
	}
	if _, err := values.Set(ctx, name, "0", IfAbsent()); err != nil {
		t.Fatal(err)
	}
	if _, err := values.Set(ctx, name, "0", IfAbsent()); !errors.Is(err, ErrPreconditionFailed) {
		t.Fatalf("want ErrPreconditionFailed, got %v", err)
	}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5; i++ {
				for {
					read, err := values.Get(ctx, name)
					if err != nil {
						t.Error(err)
						return
					}
					n, _ := strconv.Atoi(read.Value)
					_, err = values.Set(ctx, name, strconv.Itoa(n+1), IfVersion(read.Version))
					if err == nil {
						break
					}
					if !errors.Is(err, ErrPreconditionFailed) {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if v, _ := values.Get(ctx, name); v == nil || v.Value != "20" {
		t.Fatalf("no update was lost: %+v", v)
	}
	fenced := freshKey("fenced")
	if _, err := values.Set(ctx, fenced, "new", Fenced(9)); err != nil {
		t.Fatal(err)
	}
	if _, err := values.Set(ctx, fenced, "old", Fenced(8)); !errors.Is(err, ErrStaleFence) {
		t.Fatalf("want ErrStaleFence, got %v", err)
	}
	if err := values.Delete(ctx, fenced); err != nil {
		t.Fatal(err)
	}
	if v, _ := values.Get(ctx, fenced); v != nil {
		t.Fatalf("deleted: %+v", v)
	}
}
