// Package shrink gives back the room of Go maps that lost most of their
// entries.
//
// A Go map keeps the tables it grew to: deleting every Service of a
// cluster of 10,000 leaves the agent's maps of them at their full size,
// about 20 MB of the heap that no collection returns. Map rebuilds such a
// map, at a cost linear in what is left, once it holds less than a quarter
// of its peak: over a run of deletions that is amortised O(1) per
// deletion.
package shrink

// MinPeak is the smallest peak worth a rebuild: a map that never held more
// entries than this keeps its room.
const MinPeak = 1024

// Peak is the most entries a map held since it was last made. The zero
// value is ready to use.
type Peak struct{ n int }

// Map notes len(m) in p and returns m, or, when m holds less than a
// quarter of its peak and the peak was at least MinPeak, a new map with
// m's entries and room for them alone (p restarts from there). It is
// O(1) unless it rebuilds: call it where entries are deleted, and where
// they are added often enough to see the peak.
func Map[M ~map[K]V, K comparable, V any](m M, p *Peak) M {
	n := len(m)
	if n > p.n {
		p.n = n
		return m
	}
	if p.n < MinPeak || n >= p.n/4 {
		return m
	}
	out := make(M, n)
	for k, v := range m {
		out[k] = v
	}
	p.n = n
	return out
}
