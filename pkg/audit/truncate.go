package audit

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	authnv1 "k8s.io/api/authentication/v1"
)

// Truncation marks, kube-apiserver's own key, and which fields were cut.
const (
	AnnotationTruncated       = "audit.k8s.io/truncated"
	AnnotationTruncatedFields = prefix + "truncated-fields"
)

// fieldShare is the part of MaxEventSize one client-chosen field may take
// when an event is built (NewEvent), so that an event of a 1 MiB URI is
// cut before it is encoded, not encoded whole and then cut.
const fieldShare = 8

// cutter cuts an event's fields to a byte budget and notes which.
type cutter struct {
	ev    *Event
	limit int
	cut   []string
}

// text is s cut to c.limit bytes at a UTF-8 boundary; field is noted when
// it was cut.
func (c *cutter) text(field, s string) string {
	if len(s) <= c.limit {
		return s
	}
	c.cut = append(c.cut, field)
	n := c.limit
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// user keeps the groups and extra values of u that fit in c.limit bytes
// (in order), cutting long names.
func (c *cutter) user(field string, u *authnv1.UserInfo) {
	if u == nil {
		return
	}
	before := len(c.cut)
	u.Username = c.text(field+".username", u.Username)
	u.UID = c.text(field+".uid", u.UID)
	left := c.limit
	kept := u.Groups[:0]
	for _, g := range u.Groups {
		if left -= len(g); left < 0 {
			break
		}
		kept = append(kept, g)
	}
	if len(kept) < len(u.Groups) {
		c.cut = append(c.cut, field+".groups")
	}
	u.Groups = kept
	keys := make([]string, 0, len(u.Extra))
	for k := range u.Extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		vs := u.Extra[k]
		left -= len(k)
		var keep authnv1.ExtraValue
		for _, v := range vs {
			if left -= len(v); left < 0 {
				break
			}
			keep = append(keep, v)
		}
		if left < 0 && len(keep) == 0 {
			delete(u.Extra, k)
		} else {
			u.Extra[k] = keep
		}
		if len(keep) < len(vs) {
			c.cut = append(c.cut, field+".extra")
		}
	}
	if len(c.cut) > before {
		c.cut = c.cut[:before+1]
		c.cut[before] = field
	}
}

// cutFields cuts every field a client chooses the length of to c.limit.
func (c *cutter) cutFields() {
	ev := c.ev
	ev.RequestURI = c.text("requestURI", ev.RequestURI)
	ev.UserAgent = c.text("userAgent", ev.UserAgent)
	if len(ev.SourceIPs) > 16 {
		ev.SourceIPs = ev.SourceIPs[:16]
		c.cut = append(c.cut, "sourceIPs")
	}
	c.user("user", &ev.User)
	c.user("impersonatedUser", ev.ImpersonatedUser)
	if st := ev.ResponseStatus; st != nil {
		st.Message = c.text("responseStatus.message", st.Message)
	}
	keys := make([]string, 0, len(ev.Annotations))
	for k := range ev.Annotations {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ev.Annotations[k] = c.text("annotations."+k, ev.Annotations[k])
	}
	if len(c.cut) > 0 {
		ev.Annotations[AnnotationTruncated] = "true"
		ev.Annotations[AnnotationTruncatedFields] = strings.Join(c.cut, ",")
	}
}

// encodeWithin encodes ev in at most max bytes: as it is if it fits, else
// with its client-chosen fields cut to ever smaller budgets and marked; an
// event that does not fit even so is an error (dropped).
func encodeWithin(ev *Event, max int) ([]byte, error) {
	b, err := json.Marshal(ev)
	if err != nil { // every field marshals; a bug, not the client's
		return nil, fmt.Errorf("encoding an audit event: %w", err)
	}
	for limit := max / fieldShare; len(b) > max && limit >= 64; limit /= 4 {
		c := cutter{ev: ev, limit: limit}
		c.cutFields()
		if b, err = json.Marshal(ev); err != nil {
			return nil, fmt.Errorf("encoding an audit event: %w", err)
		}
	}
	if len(b) > max {
		return nil, fmt.Errorf("an audit event of %d bytes does not fit in --audit-max-event-size (%d) even with its fields cut", len(b), max)
	}
	return b, nil
}
