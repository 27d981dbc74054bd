package itest

import (
	"slices"
	"sync"
)

// APIWarnings records the warnings a client receives.
type APIWarnings struct {
	Mu   sync.Mutex
	Text []string
}

func (w *APIWarnings) HandleWarningHeader(_ int, _ string, text string) {
	w.Mu.Lock()
	defer w.Mu.Unlock()
	w.Text = append(w.Text, text)
}

func (w *APIWarnings) All() []string {
	w.Mu.Lock()
	defer w.Mu.Unlock()
	return slices.Clone(w.Text)
}
