// Package monitoring holds the chart's monitoring to what real Prometheus
// does with it. It renders charts/gateway with its ServiceMonitor,
// PrometheusRule and Grafana dashboard, turns them into what Prometheus
// itself reads (a rules file; a scrape configuration equivalent to the
// ServiceMonitor, which Prometheus Operator would generate), runs Debian's
// promtool on them, starts Debian's prometheus, and expands the dashboard's
// queries the way Grafana does before sending them.
//
// Its own tests need no cluster: `promtool check rules` and `promtool test
// rules` (testdata/alerts.test.yaml, a firing and a silent case for every
// alert), `promtool check config` on the scrape configuration, and the
// syntax of every panel query. The e2e root package's
// TestMonitoringOnRealPrometheus uses the rest against the e2e environment's
// gateway.
package monitoring
