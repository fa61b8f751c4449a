package feature

import (
	"github.com/prometheus/client_golang/prometheus"
)

// NewGauge returns an unregistered gauge named name with help text help.
func NewGauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

// NewGaugeVec returns an unregistered gauge vector with the given labels.
func NewGaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

// NewCounter returns an unregistered counter named name with help text help.
func NewCounter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// NewCounterVec returns an unregistered counter vector with the given labels.
func NewCounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// NewHistogram returns an unregistered histogram with the given buckets.
func NewHistogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
}

// Register registers every collector on r, stopping at the first error.
func Register(r prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Positive is a number an option may hold, where zero or less takes the
// default.
type Positive interface {
	~int | ~int32 | ~int64 | ~uint32 | ~float32 | ~float64
}

// DefaultIfUnset sets *v to def when it is zero or less.
func DefaultIfUnset[T Positive](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}
