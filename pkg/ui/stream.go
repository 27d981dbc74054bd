package ui

import (
	"net/http"
	"time"
)

// streamWriteTimeout bounds each write of a stream: a browser that stops
// reading is let go, however long the whole stream lasts.
const streamWriteTimeout = 30 * time.Second

// stream is a response that lasts longer than a request may (a download, a
// live page): the server's read and write timeouts, which are for
// requests, are lifted, and each write is bounded instead, and only the
// writes. Between them (a node may pause, an operation may not change for
// minutes) there is no deadline, since an HTTP/2 write deadline resets the
// stream when it passes, written or not.
type stream struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func newStream(w http.ResponseWriter) *stream {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	return &stream{w: w, rc: rc}
}

// Write writes p within streamWriteTimeout.
func (s *stream) Write(p []byte) (int, error) {
	return s.bounded(p, false)
}

// send writes p and flushes it to the browser, within streamWriteTimeout.
func (s *stream) send(p []byte) error {
	_, err := s.bounded(p, true)
	return err
}

func (s *stream) bounded(p []byte, flush bool) (int, error) {
	_ = s.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	defer func() { _ = s.rc.SetWriteDeadline(time.Time{}) }()
	n, err := s.w.Write(p)
	if err == nil && flush {
		err = s.rc.Flush()
	}
	return n, err
}
