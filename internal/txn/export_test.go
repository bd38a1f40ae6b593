package txn

// GitMaintains is gitMaintains, for this package's external tests.
func (w *Writer) GitMaintains() bool { return w.gitMaintains() }
