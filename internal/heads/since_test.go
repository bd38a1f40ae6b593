package heads

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// sinceFile is a heads file with a snapshot of n chains and a few lines
// appended, and a position taken after them.
func sinceFile(t *testing.T) (*headsFile, string) {
	t.Helper()
	h := newHeadsFile(filepath.Join(t.TempDir(), "w.heads"), "w")
	snap := map[string]Mark{}
	for i := 0; i < 50; i++ {
		snap[fmt.Sprintf("journal/T-%d", i)] = mark(i)
	}
	if err := h.rewrite(snap); err != nil {
		t.Fatal(err)
	}
	m := mark(100)
	if err := h.write([]entry{{chain: "journal/T-1", mark: &m}}, nil); err != nil {
		t.Fatal(err)
	}
	pos, err := h.position()
	if err != nil || !strings.HasPrefix(pos, "v1 ") {
		t.Fatalf("position %q, %v", pos, err)
	}
	return h, pos
}

func appendHeads(t *testing.T, h *headsFile, chains ...string) {
	t.Helper()
	var es []entry
	for i, c := range chains {
		m := mark(200 + i)
		es = append(es, entry{chain: c, mark: &m})
	}
	if err := h.write(es, nil); err != nil {
		t.Fatal(err)
	}
}

// The chains written after a position are the lines appended after it:
// not the ones before it, each once, a forget included.
func TestHeadsChangedSincePosition(t *testing.T) {
	h, pos := sinceFile(t)
	if got, ok, err := h.changedSince(pos); err != nil || !ok || len(got) != 0 {
		t.Fatalf("nothing written since: %v %v %v", got, ok, err)
	}
	appendHeads(t, h, "journal/T-7", "ledger/T-7")
	appendHeads(t, h, "journal/T-7", "spine/w")
	if err := h.write([]entry{{chain: "journal/T-9"}}, nil); err != nil {
		t.Fatal(err)
	}
	got, ok, err := h.changedSince(pos)
	slices.Sort(got)
	if err != nil || !ok || strings.Join(got, ",") != "journal/T-7,journal/T-9,ledger/T-7,spine/w" {
		t.Fatalf("written since: %v %v %v", got, ok, err)
	}
	// A line being appended (no newline yet) is after the position taken
	// now, and not a chain yet.
	f, err := os.OpenFile(h.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	m := mark(300)
	line := encodeLine("journal/T-20", &m)
	f.Write(line[:20])
	f.Close()
	pos2, err := h.position()
	if err != nil {
		t.Fatal(err)
	}
	if got, ok, _ := h.changedSince(pos2); !ok || len(got) != 0 {
		t.Fatalf("since a position taken mid-line: %v %v", got, ok)
	}
	f, _ = os.OpenFile(h.path, os.O_WRONLY|os.O_APPEND, 0)
	f.Write(line[20:])
	f.Close()
	if got, ok, _ := h.changedSince(pos2); !ok || strings.Join(got, ",") != "journal/T-20" {
		t.Fatalf("the line finished after the position: %v %v", got, ok)
	}
}

// A position the file no longer stands on tells nothing: the caller checks
// every head. Each way the file can change other than by appends.
func TestHeadsChangedSinceRefusesAnotherFile(t *testing.T) {
	cases := []struct {
		name   string
		change func(t *testing.T, h *headsFile)
	}{
		{"rewritten as a snapshot", func(t *testing.T, h *headsFile) {
			all, err := h.all()
			if err != nil {
				t.Fatal(err)
			}
			if err := h.rewrite(all); err != nil {
				t.Fatal(err)
			}
			appendHeads(t, h, "journal/T-3")
		}},
		{"the same bytes in a new file", func(t *testing.T, h *headsFile) {
			b, err := os.ReadFile(h.path)
			if err != nil {
				t.Fatal(err)
			}
			tmp := h.path + ".new"
			if err := os.WriteFile(tmp, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, h.path); err != nil {
				t.Fatal(err)
			}
		}},
		{"its tail lost", func(t *testing.T, h *headsFile) {
			st, _ := os.Stat(h.path)
			if err := os.Truncate(h.path, st.Size()-10); err != nil {
				t.Fatal(err)
			}
		}},
		{"its tail lost and written again past the position", func(t *testing.T, h *headsFile) {
			st, _ := os.Stat(h.path)
			if err := os.Truncate(h.path, st.Size()-40); err != nil {
				t.Fatal(err)
			}
			appendHeads(t, h, "journal/T-4", "journal/T-5")
		}},
		{"removed", func(t *testing.T, h *headsFile) {
			if err := os.Remove(h.path); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, pos := sinceFile(t)
			tc.change(t, h)
			if got, ok, err := h.changedSince(pos); ok || err != nil {
				t.Fatalf("after the file was %s: %v %v %v", tc.name, got, ok, err)
			}
		})
	}
	for _, pos := range []string{"", "v2 1 2 3 00000000", "v1 x 2 3 00000000", "v1 1 2 3"} {
		h, _ := sinceFile(t)
		if _, ok, _ := h.changedSince(pos); ok {
			t.Fatalf("position %q read as one", pos)
		}
	}
}
