package monitoring

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Binary finds Debian's prometheus or promtool: $PROMETHEUS or $PROMTOOL,
// else on PATH. A missing one fails the test (`make tools` installs them):
// a monitoring test that skips would pass without checking anything.
func Binary(t testing.TB, name string) string {
	t.Helper()
	envVar := map[string]string{"prometheus": "PROMETHEUS", "promtool": "PROMTOOL"}[name]
	if p := os.Getenv(envVar); p != "" {
		return p
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found (install Debian's prometheus package with `make tools`, or set %s): %v", name, envVar, err)
	}
	return p
}

// Promtool runs promtool with args in dir and fails t, with its output,
// unless it succeeds.
func Promtool(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), Binary(t, "promtool"), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// Prometheus is a running prometheus process on loopback.
type Prometheus struct {
	// URL is its base URL (http://127.0.0.1:<port>).
	URL string
	// API is a client of its HTTP API.
	API     promv1.API
	cmd     *exec.Cmd
	done    chan struct{}
	logPath string
}

// StartPrometheus writes config into dir and runs prometheus with it,
// its TSDB in dir/data and its log in dir/prometheus.log, listening on an
// ephemeral loopback port, and returns once it reports ready.
func StartPrometheus(ctx context.Context, bin, dir string, config []byte) (*Prometheus, error) {
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, config, 0o600); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logPath := filepath.Join(dir, "prometheus.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &Prometheus{URL: "http://" + addr, cmd: cmd, done: make(chan struct{}), logPath: logPath}
	go func() { _ = cmd.Wait(); close(p.done) }()
	client, err := api.NewClient(api.Config{Address: p.URL})
	if err != nil {
		p.Stop()
		return nil, err
	}
	p.API = promv1.NewAPI(client)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-p.done:
			return false, errors.New("prometheus exited")
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/-/ready", nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("wait for prometheus to be ready: %w\n%s", err, p.LogTail())
	}
	return p, nil
}

// Stop ends the process (SIGTERM, SIGKILL after 10s) and waits for it.
func (p *Prometheus) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// LogTail is the end of prometheus' log.
func (p *Prometheus) LogTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
		b = b[bytes.IndexByte(b, '\n')+1:]
	}
	return "----- prometheus log (end) -----\n" + string(b)
}

// WaitScrapedAfter waits until every active target of job has been scraped
// successfully twice since t, so the counters a test drove up are in the
// TSDB with a sample before and after their last change.
func (p *Prometheus) WaitScrapedAfter(ctx context.Context, job string, t time.Time, timeout time.Duration) error {
	// Each target's first scrape after t; it is done once scraped again.
	first := map[string]time.Time{}
	last := "no active target"
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		res, err := p.API.Targets(ctx)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		seen, done := 0, true
		for _, at := range res.Active {
			if string(at.Labels["job"]) != job {
				continue
			}
			seen++
			if at.Health != promv1.HealthGood {
				last = fmt.Sprintf("target %s is %s: %s", at.ScrapeURL, at.Health, at.LastError)
				return false, nil
			}
			f, ok := first[at.ScrapeURL]
			switch {
			case !at.LastScrape.After(t):
				last = fmt.Sprintf("last scrape of %s %s not after %s", at.ScrapeURL, at.LastScrape.Format(time.RFC3339Nano), t.Format(time.RFC3339Nano))
				done = false
			case !ok:
				first[at.ScrapeURL] = at.LastScrape
				done = false
			case !at.LastScrape.After(f):
				last = fmt.Sprintf("%s scraped once since %s", at.ScrapeURL, t.Format(time.RFC3339Nano))
				done = false
			}
		}
		return seen > 0 && done, nil
	})
	if err != nil {
		return fmt.Errorf("wait for prometheus to scrape job %s twice after %s (%s): %w", job, t.Format(time.RFC3339Nano), last, err)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
