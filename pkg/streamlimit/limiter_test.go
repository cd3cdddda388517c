package streamlimit

import "testing"

func TestStreamLimiter(t *testing.T) {
	type step struct {
		client string
		// want is "" for a granted slot, else the scope that refuses it.
		want string
		// release, when >= 0, releases the slot granted at that step index
		// instead of acquiring.
		release int
	}
	acq := func(client, want string) step { return step{client: client, want: want, release: -1} }
	rel := func(i int) step { return step{release: i} }
	tests := []struct {
		name             string
		total, perClient int
		steps            []step
	}{
		{"unlimited", 0, 0, []step{acq("a", ""), acq("a", ""), acq("a", ""), acq("b", "")}},
		{"per client only", 0, 2, []step{acq("a", ""), acq("a", ""), acq("a", "client"), acq("b", ""), acq("b", ""), acq("b", "client")}},
		{"total only", 2, 0, []step{acq("a", ""), acq("b", ""), acq("c", "total"), acq("a", "total")}},
		{"total is checked first", 2, 1, []step{acq("a", ""), acq("b", ""), acq("a", "total")}},
		{"release frees the client slot", 0, 1, []step{acq("a", ""), acq("a", "client"), rel(0), acq("a", "")}},
		{"release frees the total slot", 1, 0, []step{acq("a", ""), acq("b", "total"), rel(0), acq("b", "")}},
		{"double release counts once", 2, 0, []step{acq("a", ""), acq("b", ""), rel(0), rel(0), acq("c", ""), acq("d", "total")}},
		{"clients are independent", 3, 1, []step{acq("a", ""), acq("b", ""), acq("a", "client"), acq("c", ""), acq("d", "total")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := New(tt.total, tt.perClient)
			releases := map[int]func(){}
			for i, s := range tt.steps {
				if s.release >= 0 {
					releases[s.release]()
					continue
				}
				release, limitedBy := l.Acquire(s.client)
				if limitedBy != s.want || (release == nil) != (s.want != "") {
					t.Fatalf("step %d (%s): limitedBy %q release %v, want %q", i, s.client, limitedBy, release != nil, s.want)
				}
				if release != nil {
					releases[i] = release
				}
			}
			for _, release := range releases {
				release()
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.open != 0 || len(l.byClient) != 0 {
				t.Errorf("after releasing everything: open %d, clients %v", l.open, l.byClient)
			}
		})
	}
}
