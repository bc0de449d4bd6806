package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/steadkit/stead/engine"
)

// metrics are the server's Prometheus series.
type metrics struct {
	requests      *prometheus.CounterVec
	latency       *prometheus.HistogramVec
	uploads       prometheus.Gauge
	inFlight      prometheus.Gauge
	blobPuts      *prometheus.CounterVec
	blobPutBytes  prometheus.Counter
	blobGets      prometheus.Counter
	blobGetBytes  prometheus.Counter
	lockAcquires  *prometheus.CounterVec
	lockLosses    prometheus.Counter
	recordSaves   *prometheus.CounterVec
	recordClaimed prometheus.Counter
	refWrites     *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stead_http_requests_total", Help: "HTTP requests answered, by route pattern and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "stead_http_request_duration_seconds", Help: "Time to answer an HTTP request, by route pattern and status code.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"route", "code"}),
		uploads: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stead_http_uploads_in_progress", Help: "Blob uploads being read.",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stead_http_requests_in_flight", Help: "HTTP requests being served.",
		}),
		blobPuts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stead_blob_puts_total", Help: "Blobs stored, by whether the key was new or already stored (a dedup hit).",
		}, []string{"result"}),
		blobPutBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stead_blob_put_bytes_total", Help: "Bytes of blob values put.",
		}),
		blobGets: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stead_blob_gets_total", Help: "Blob reads served.",
		}),
		blobGetBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stead_blob_get_bytes_total", Help: "Bytes of blob values served.",
		}),
		lockAcquires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stead_lock_acquires_total", Help: "Lock acquire requests, by whether the lock was granted or refused.",
		}, []string{"result"}),
		lockLosses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stead_lock_losses_total", Help: "Lock renewals and releases refused because the grant was no longer current.",
		}),
		recordSaves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stead_record_saves_total", Help: "Record saves, by whether they were stored or lost the compare-and-swap.",
		}, []string{"result"}),
		recordClaimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stead_record_claims_total", Help: "Records claimed.",
		}),
		refWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stead_ref_writes_total", Help: "Refs written, by operation: set or delete.",
		}, []string{"op"}),
	}
	reg.MustRegister(m.requests, m.latency, m.uploads, m.inFlight, m.blobPuts, m.blobPutBytes, m.blobGets, m.blobGetBytes,
		m.lockAcquires, m.lockLosses, m.recordSaves, m.recordClaimed, m.refWrites)
	return m
}

// registerPool exports the statistics of an engine's connection pool.
func registerPool(reg prometheus.Registerer, pool engine.PoolReporter) {
	gauge := func(name, help string, f func(engine.PoolStats) int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(f(pool.PoolStats())) })
	}
	reg.MustRegister(
		gauge("stead_pool_connections", "PostgreSQL pool connections open.", func(s engine.PoolStats) int { return s.Open }),
		gauge("stead_pool_connections_idle", "PostgreSQL pool connections idle.", func(s engine.PoolStats) int { return s.Idle }),
		gauge("stead_pool_connections_in_use", "PostgreSQL pool connections in use.", func(s engine.PoolStats) int { return s.InUse }),
		gauge("stead_pool_connections_max", "PostgreSQL pool size.", func(s engine.PoolStats) int { return s.Max }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "stead_pool_acquire_waits_total", Help: "Pool acquires that waited for a connection."},
			func() float64 { return float64(pool.PoolStats().EmptyAcquires) }),
	)
}

func (m *metrics) observe(route string, status int, d time.Duration) {
	code := strconv.Itoa(status)
	m.requests.WithLabelValues(route, code).Inc()
	m.latency.WithLabelValues(route, code).Observe(d.Seconds())
}

func (m *metrics) blobPut(existed bool, n int) {
	result := "created"
	if existed {
		result = "existed"
	}
	m.blobPuts.WithLabelValues(result).Inc()
	m.blobPutBytes.Add(float64(n))
}

func (m *metrics) blobGet(n int64) {
	m.blobGets.Inc()
	m.blobGetBytes.Add(float64(n))
}

func (m *metrics) lockAcquired(granted bool) {
	result := "refused"
	if granted {
		result = "granted"
	}
	m.lockAcquires.WithLabelValues(result).Inc()
}

func (m *metrics) lockLost() { m.lockLosses.Inc() }

func (m *metrics) recordSave(ok bool) {
	result := "conflict"
	if ok {
		result = "stored"
	}
	m.recordSaves.WithLabelValues(result).Inc()
}

func (m *metrics) recordClaims(n int) { m.recordClaimed.Add(float64(n)) }

func (m *metrics) refSet()    { m.refWrites.WithLabelValues("set").Inc() }
func (m *metrics) refDelete() { m.refWrites.WithLabelValues("delete").Inc() }

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	promhttp.HandlerFor(s.gather, promhttp.HandlerOpts{}).ServeHTTP(w, r)
}
