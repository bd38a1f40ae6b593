package fold

import (
	"fmt"
	"testing"
)

func TestMemoKeepsTheMostRecentlyUsed(t *testing.T) {
	m := newMemo[int](3)
	for i := range 3 {
		m.put(fmt.Sprint(i), i)
	}
	if _, ok := m.get("0"); !ok { // 0 is now the most recently used
		t.Fatal("0 was forgotten within the bound")
	}
	m.put("3", 3) // forgets 1, the least recently used
	if _, ok := m.get("1"); ok {
		t.Fatal("1, the least recently used, was kept past the bound")
	}
	for _, k := range []string{"0", "2", "3"} {
		if _, ok := m.get(k); !ok {
			t.Fatalf("%s was forgotten; only 1 should have been", k)
		}
	}
	m.put("2", 20) // a new value for a kept key takes no more room
	if v, _ := m.get("2"); v != 20 || m.len() != 3 {
		t.Fatalf("after replacing 2: value %d, %d kept; want 20, 3", v, m.len())
	}
	for i := range 1000 {
		m.put(fmt.Sprint("t", i), i)
		if m.len() > 3 {
			t.Fatalf("%d kept after %d puts; the bound is 3", m.len(), i+1)
		}
	}
	if v, ok := m.get("t999"); !ok || v != 999 {
		t.Fatalf("the last put is not kept: %d, %v", v, ok)
	}
	if len(m.byKey) != m.order.Len() {
		t.Fatalf("index holds %d keys, order %d", len(m.byKey), m.order.Len())
	}
}
