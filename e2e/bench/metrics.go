package bench

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// parseGauges reads samples from the Prometheus text format and returns
// their values in the order of names; a missing one is an error. A name is
// matched whole, as the format writes it: a labelled sample is named with
// all its labels, as name{label="value"}.
func parseGauges(r io.Reader, names ...string) ([]float64, error) {
	want := make(map[string]int, len(names))
	for i, n := range names {
		want[n] = i
	}
	out := make([]float64, len(names))
	found := make([]bool, len(names))
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, " ")
		i, wanted := want[name]
		if !ok || !wanted {
			continue
		}
		// A sample may carry a timestamp after the value.
		value, _, _ = strings.Cut(strings.TrimSpace(value), " ")
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return nil, fmt.Errorf("metric %s: %w", name, err)
		}
		out[i], found[i] = v, true
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for i, ok := range found {
		if !ok {
			return nil, fmt.Errorf("metric %s not exported", names[i])
		}
	}
	return out, nil
}

func (r *Runner) metricsClient() (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(r.Env.CAPEM()) {
		return nil, fmt.Errorf("environment CA is not PEM")
	}
	return &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}, nil
}
