package standin

import (
	"sort"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

const (
	clusterAPIVersion = "cluster.karmada.io/v1alpha1"
	clusterKind       = "Cluster"

	// historySize bounds the events kept for watches that resume from a
	// resourceVersion; older resourceVersions get 410 Gone, as from etcd
	// after compaction, and informers relist.
	historySize = 1024
	// watcherBuffer is how far a slow watcher may lag before it is closed
	// (it then rewatches from its last resourceVersion).
	watcherBuffer = 256

	// Reasons and messages of the Ready condition, as Karmada's cluster
	// status controller writes them.
	clusterReadyReason         = "ClusterReady"
	clusterReadyMessage        = "cluster is healthy and ready to accept workloads"
	clusterNotReadyReason      = "ClusterNotReady"
	clusterNotReachableReason  = "ClusterNotReachable"
	clusterNotReachableMessage = "cluster is not reachable"
)

// clusterEvent is one change of the store, at resourceVersion rv.
type clusterEvent struct {
	rv      uint64
	typ     watch.EventType
	cluster *karmada.Cluster
}

// clusterWatcher receives events after its registration.
type clusterWatcher struct {
	ch     chan clusterEvent
	closed bool
}

// clusterStore holds the Cluster objects the aggregated API serves. They
// live only in memory: the real karmada-aggregated-apiserver stores them in
// etcd, but nothing here needs them to outlive the process.
type clusterStore struct {
	mu       sync.Mutex
	rv       uint64
	objs     map[string]*karmada.Cluster
	history  []clusterEvent
	watchers map[*clusterWatcher]struct{}
}

func newClusterStore() *clusterStore {
	return &clusterStore{rv: 1, objs: map[string]*karmada.Cluster{}, watchers: map[*clusterWatcher]struct{}{}}
}

// add creates a Cluster for spec, with no conditions until the first probe.
func (s *clusterStore) add(name string, spec karmada.ClusterSpec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &karmada.Cluster{
		TypeMeta: metav1.TypeMeta{APIVersion: clusterAPIVersion, Kind: clusterKind},
		ObjectMeta: metav1.ObjectMeta{
			Name:              name,
			UID:               types.UID(uuid.NewUUID()),
			CreationTimestamp: metav1.Now(),
		},
		Spec: spec,
	}
	typ := watch.Added
	if old, ok := s.objs[name]; ok {
		c.UID, c.CreationTimestamp, c.Status = old.UID, old.CreationTimestamp, old.Status
		typ = watch.Modified
	}
	s.commit(typ, c)
}

// get returns a copy of the named Cluster.
func (s *clusterStore) get(name string) (*karmada.Cluster, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.objs[name]
	if !ok {
		return nil, false
	}
	return c.DeepCopyObject().(*karmada.Cluster), true
}

// ready reports the named Cluster's Ready condition.
func (s *clusterStore) ready(name string) bool {
	c, ok := s.get(name)
	if !ok {
		return false
	}
	r, _ := c.Ready()
	return r
}

// setHealth records a probe result. Only changes bump the resourceVersion,
// so watchers see an event when Ready flips, not on every probe.
func (s *clusterStore) setHealth(name, version string, ready bool, reason, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.objs[name]
	if !ok {
		return
	}
	c := old.DeepCopyObject().(*karmada.Cluster)
	if version != "" {
		c.Status.KubernetesVersion = version
	}
	status := metav1.ConditionFalse
	if ready {
		status = metav1.ConditionTrue
	}
	cond := metav1.Condition{Type: karmada.ClusterConditionReady, Status: status, Reason: reason, Message: message}
	var conds []metav1.Condition
	found := false
	for _, existing := range c.Status.Conditions {
		if existing.Type != cond.Type {
			conds = append(conds, existing)
			continue
		}
		found = true
		if existing.Status == cond.Status && existing.Reason == cond.Reason && existing.Message == cond.Message &&
			c.Status.KubernetesVersion == old.Status.KubernetesVersion {
			return
		}
		cond.LastTransitionTime = existing.LastTransitionTime
		if existing.Status != cond.Status {
			cond.LastTransitionTime = metav1.NewTime(time.Now())
		}
		conds = append(conds, cond)
	}
	if !found {
		cond.LastTransitionTime = metav1.NewTime(time.Now())
		conds = append(conds, cond)
	}
	c.Status.Conditions = conds
	s.commit(watch.Modified, c)
}

// commit stores c at the next resourceVersion and tells the watchers.
// Callers hold s.mu.
func (s *clusterStore) commit(typ watch.EventType, c *karmada.Cluster) {
	s.rv++
	c.ResourceVersion = strconv.FormatUint(s.rv, 10)
	s.objs[c.Name] = c
	ev := clusterEvent{rv: s.rv, typ: typ, cluster: c.DeepCopyObject().(*karmada.Cluster)}
	s.history = append(s.history, ev)
	if len(s.history) > historySize {
		s.history = s.history[len(s.history)-historySize:]
	}
	for w := range s.watchers {
		select {
		case w.ch <- ev:
		default:
			// Too slow: end its watch; the client resumes from the last
			// resourceVersion it saw.
			s.closeWatcherLocked(w)
		}
	}
}

// list returns copies of every Cluster, sorted by name, and the store's
// resourceVersion.
func (s *clusterStore) list() ([]*karmada.Cluster, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listLocked(), s.rv
}

func (s *clusterStore) listLocked() []*karmada.Cluster {
	out := make([]*karmada.Cluster, 0, len(s.objs))
	for _, c := range s.objs {
		out = append(out, c.DeepCopyObject().(*karmada.Cluster))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// errExpired says a watch asked for a resourceVersion older than the history.
type errExpired struct{ rv uint64 }

func (e errExpired) Error() string {
	return "too old resource version: " + strconv.FormatUint(e.rv, 10)
}

// watchFrom registers a watcher and returns the events it must send first:
// with initial (sendInitialEvents, or no resourceVersion) an ADDED per
// Cluster, else the recorded events after fromRV. The returned rv is the
// store's resourceVersion at registration, for the initial-events bookmark.
func (s *clusterStore) watchFrom(fromRV uint64, initial bool) ([]clusterEvent, uint64, *clusterWatcher, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var first []clusterEvent
	if initial {
		for _, c := range s.listLocked() {
			first = append(first, clusterEvent{rv: s.rv, typ: watch.Added, cluster: c})
		}
	} else {
		oldest := s.rv
		if len(s.history) > 0 {
			oldest = s.history[0].rv - 1
		}
		if fromRV < oldest {
			return nil, 0, nil, errExpired{rv: fromRV}
		}
		for _, ev := range s.history {
			if ev.rv > fromRV {
				first = append(first, ev)
			}
		}
	}
	w := &clusterWatcher{ch: make(chan clusterEvent, watcherBuffer)}
	s.watchers[w] = struct{}{}
	return first, s.rv, w, nil
}

// stopWatch unregisters w.
func (s *clusterStore) stopWatch(w *clusterWatcher) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeWatcherLocked(w)
}

func (s *clusterStore) closeWatcherLocked(w *clusterWatcher) {
	if w.closed {
		return
	}
	w.closed = true
	delete(s.watchers, w)
	close(w.ch)
}
