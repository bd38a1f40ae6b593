package fold

import "container/list"

// memoTasks is how many tasks' folds of each chain kind a Folder keeps in
// memory: the tasks read most recently. A fold it no longer keeps is read
// again from the fold cache on disk (a chain of cacheMinRows rows or more)
// or folded from its chain; nothing is decided from the memo that a fold
// from the chain would not decide. At about 1 KB a fold, the bound keeps a
// long-running server's folds within some 16 MB of each kind whatever the
// number of tasks (every task's folds were kept before: 180 MB at 100,000
// tasks after serve's first scan).
const memoTasks = 16384

// memo keeps values by task, the most recently used first, at most max.
type memo[V any] struct {
	max   int
	order *list.List // of *memoEntry[V], the most recently used first
	byKey map[string]*list.Element
}

type memoEntry[V any] struct {
	key string
	val V
}

func newMemo[V any](max int) *memo[V] {
	return &memo[V]{max: max, order: list.New(), byKey: map[string]*list.Element{}}
}

// get returns the value kept for key, now the most recently used.
func (m *memo[V]) get(key string) (V, bool) {
	e, ok := m.byKey[key]
	if !ok {
		var zero V
		return zero, false
	}
	m.order.MoveToFront(e)
	return e.Value.(*memoEntry[V]).val, true
}

// put keeps val for key, the most recently used, and forgets the least
// recently used past max.
func (m *memo[V]) put(key string, val V) {
	if e, ok := m.byKey[key]; ok {
		e.Value.(*memoEntry[V]).val = val
		m.order.MoveToFront(e)
		return
	}
	m.byKey[key] = m.order.PushFront(&memoEntry[V]{key: key, val: val})
	for m.order.Len() > m.max {
		last := m.order.Back()
		m.order.Remove(last)
		delete(m.byKey, last.Value.(*memoEntry[V]).key)
	}
}

// len is how many values are kept.
func (m *memo[V]) len() int { return m.order.Len() }
