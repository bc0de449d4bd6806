package server

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/steadkit/stead/engine/remote/wire"
)

// usageMetrics are the usage of the mounts' ref prefixes, read after each
// background sweep (Mount.RefPrefix).
type usageMetrics struct {
	refs, blobs, bytes, dedupSaved *prometheus.GaugeVec
}

func newUsageMetrics(reg prometheus.Registerer) *usageMetrics {
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help + " Read after each background sweep, by front end's ref prefix (stead usage PREFIX); 0 before the first."}, []string{"prefix"})
	}
	m := &usageMetrics{
		refs:       gauge("stead_usage_refs", "Live refs under the prefix (at most stead.MaxUsageRefs are read)."),
		blobs:      gauge("stead_usage_blobs", "Distinct stored blobs the refs under the prefix name."),
		bytes:      gauge("stead_usage_bytes", "Bytes of the distinct blobs the refs under the prefix name, each once."),
		dedupSaved: gauge("stead_usage_dedup_saved_bytes", "Bytes storing each blob once saved within the prefix."),
	}
	reg.MustRegister(m.refs, m.blobs, m.bytes, m.dedupSaved)
	return m
}

// noteUsage reads the usage of each mount's ref prefix into the metrics;
// a failure is logged and leaves its last reading.
func (s *Server) noteUsage(ctx context.Context) {
	for _, m := range s.opts.Mounts {
		if m.RefPrefix == "" {
			continue
		}
		u, err := s.st.Usage(ctx, m.RefPrefix)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("usage of "+m.RefPrefix+" not read", "err", err)
			}
			continue
		}
		s.usageMetrics.refs.WithLabelValues(m.RefPrefix).Set(float64(u.Refs))
		s.usageMetrics.blobs.WithLabelValues(m.RefPrefix).Set(float64(u.Blobs))
		s.usageMetrics.bytes.WithLabelValues(m.RefPrefix).Set(float64(u.Bytes))
		s.usageMetrics.dedupSaved.WithLabelValues(m.RefPrefix).Set(float64(u.DedupSavedBytes))
	}
}

// usage answers GET /v1/usage?prefix=P: what the live refs under P hold
// (stead.Store.Usage, bounded at stead.MaxUsageRefs refs).
func (s *Server) usage(w http.ResponseWriter, r *http.Request) {
	u, err := s.st.Usage(r.Context(), r.URL.Query().Get("prefix"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.Usage{Prefix: u.Prefix, Refs: u.Refs, Blobs: u.Blobs, Bytes: u.Bytes,
		ReferencedBytes: u.ReferencedBytes, DedupSavedBytes: u.DedupSavedBytes, Truncated: u.Truncated, LastPush: u.LastPush, LastPull: u.LastPull})
}
