package server

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestMemo: one computation per name and key however many ask at once; a
// new key replaces the answer; errors are not kept; answers expire; the
// bounds hold, least recently used out first.
func TestMemo(t *testing.T) {
	m := newMemo()
	var calls atomic.Int32
	release := make(chan struct{})
	// Each reader says here that it computes or waits for another's
	// computation; all have asked when 100 have said so.
	asked := make(chan struct{}, 200)
	m.waiting = func() { asked <- struct{}{} }
	slow := func() (any, int64, error) {
		calls.Add(1)
		asked <- struct{}{}
		<-release
		return "v1", 10, nil
	}
	var wg sync.WaitGroup
	vals := make([]any, 100)
	for i := range vals {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vals[i], _ = m.get("report\x00T", "k1", slow)
		}()
	}
	for range vals {
		<-asked
	}
	close(release)
	wg.Wait()
	if n := calls.Load(); n != 1 || m.computations("report\x00T") != 1 {
		t.Fatalf("100 concurrent readers computed %d times", n)
	}
	for _, v := range vals {
		if v != "v1" {
			t.Fatalf("a reader got %v", v)
		}
	}
	v, _ := m.get("report\x00T", "k2", func() (any, int64, error) { return "v2", 10, nil })
	if v != "v2" || m.computations("report\x00T") != 2 {
		t.Fatalf("a new key: %v, %d computations", v, m.computations("report\x00T"))
	}
	if m.bytes != 10 || m.order.Len() != 1 {
		t.Fatalf("the replaced answer is still counted: %d bytes, %d entries", m.bytes, m.order.Len())
	}
	boom := errors.New("boom")
	if _, err := m.get("x", "k", func() (any, int64, error) { return nil, 0, boom }); err != boom {
		t.Fatal(err)
	}
	if v, err := m.get("x", "k", func() (any, int64, error) { return "ok", 1, nil }); err != nil || v != "ok" {
		t.Fatalf("an error was kept: %v %v", v, err)
	}

	// The clock moves past the answers' age: computed again.
	now := time.Now()
	m.now = func() time.Time { return now }
	m.get("x", "k", func() (any, int64, error) { return "kept", 1, nil })
	if m.computations("x") != 2 {
		t.Fatalf("a fresh answer was not used: %d computations", m.computations("x"))
	}
	now = now.Add(m.maxAge)
	m.get("x", "k", func() (any, int64, error) { return "again", 1, nil })
	if m.computations("x") != 3 {
		t.Fatalf("an expired answer was used: %d computations", m.computations("x"))
	}

	m = newMemo()
	m.maxEntries, m.maxBytes = 4, 100
	for i := range 6 {
		m.get(fmt.Sprint(i), "k", func() (any, int64, error) { return i, 10, nil })
	}
	m.get("2", "k", nil) // used: stays
	m.get("6", "k", func() (any, int64, error) { return 6, 10, nil })
	if m.order.Len() != 4 || m.entries["2"] == nil || m.entries["3"] != nil || m.entries["0"] != nil {
		t.Fatalf("after the bound: %d entries %v", m.order.Len(), m.entries)
	}
	m.get("big", "k", func() (any, int64, error) { return "big", 95, nil })
	if m.bytes > m.maxBytes {
		t.Fatalf("%d bytes kept, at most %d", m.bytes, m.maxBytes)
	}
}

// TestMemoLongComputation: an answer whose computation took longer than
// the memo's age (a list of many tasks) is used for that age from when it
// ended, by the requests whose view was taken by then however long they
// took to reach the memo, and it is not the first out as it ends, behind
// the answers it made.
func TestMemoLongComputation(t *testing.T) {
	m := newMemo()
	m.maxBytes = 4
	now := time.Now()
	m.now = func() time.Time { return now }
	list := func() (any, int64, error) {
		for i := range 3 { // the list's tasks, each an answer of its own
			m.get(fmt.Sprint("task", i), "k", func() (any, int64, error) { return i, 1, nil })
			now = now.Add(m.maxAge)
		}
		return "list", 3, nil
	}
	if v, _ := m.get("list", "k", list); v != "list" {
		t.Fatalf("got %v", v)
	}
	if m.entries["list"] == nil || m.bytes > m.maxBytes {
		t.Fatalf("the list was pushed out as it ended (%d bytes kept)", m.bytes)
	}
	asOf := now.Add(m.maxAge - time.Millisecond)
	now = asOf.Add(m.maxAge) // the request's view took long
	if v, _ := m.getAsOf("list", "k", asOf, list); v != "list" || m.computations("list") != 1 {
		t.Fatalf("the list was computed %d times", m.computations("list"))
	}
	if m.getAsOf("list", "k", asOf.Add(time.Millisecond), list); m.computations("list") != 2 {
		t.Fatalf("a list older than the memo's age was used: computed %d times", m.computations("list"))
	}
}
