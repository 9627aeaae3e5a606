package engine

// SupportsHiddenOnly reports whether m's backend accepts HiddenOnly
// forwards (BatchItem.HiddenOnly).
func (m *Model) SupportsHiddenOnly() bool {
	h, ok := m.backend.(HiddenOnlyForwarder)
	return ok && h.ForwardsHiddenOnly()
}
