package talos

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// CallDuration is the latency of the Talos API calls Ichor makes, by gRPC
// method and status code: a unary call until its answer, a stream until it
// ends (a stream its reader closes early is not observed). The process that
// dials registers it (ichor-controller: on its /metrics).
var CallDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Namespace: "ichor",
	Subsystem: "talos",
	Name:      "call_duration_seconds",
	Help:      "Latency of Talos API calls by gRPC method and status code; streams until they end.",
	Buckets:   prometheus.ExponentialBuckets(0.001, 2, 16), // 1 ms to about 33 s
}, []string{"method", "code"})

// observed are the dial options that time every call of a session.
var observed = []grpc.DialOption{
	grpc.WithChainUnaryInterceptor(observeUnary),
	grpc.WithChainStreamInterceptor(observeStream),
}

func observeUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	start := time.Now()
	err := invoker(ctx, method, req, reply, cc, opts...)
	CallDuration.WithLabelValues(method, status.Code(err).String()).Observe(time.Since(start).Seconds())
	return err
}

func observeStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	start := time.Now()
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		CallDuration.WithLabelValues(method, status.Code(err).String()).Observe(time.Since(start).Seconds())
		return nil, err
	}
	return &observedStream{ClientStream: s, method: method, start: start}, nil
}

// observedStream observes its call once it ends.
type observedStream struct {
	grpc.ClientStream
	method string
	start  time.Time
	once   sync.Once
}

func (s *observedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		code := status.Code(err)
		if errors.Is(err, io.EOF) {
			code = codes.OK
		}
		s.once.Do(func() { CallDuration.WithLabelValues(s.method, code.String()).Observe(time.Since(s.start).Seconds()) })
	}
	return err
}
