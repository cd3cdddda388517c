package apiresponse

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
)

// decoder decodes Status from protobuf or JSON, as the Content-Type an
// upstream answered with says.
var decoder = scheme.Codecs.UniversalDeserializer()

// MaxMessageBytes bounds an upstream's message the gateway repeats: it may
// end up in a header, where a long one would cost every client its header
// budget.
const MaxMessageBytes = 1024

// Message is the message of the Status an upstream answered with,
// protobuf or JSON as its Content-Type says (the cluster proxy relays the
// member's protobuf as such when asked for it), else the start of the body.
// Either way it is readable text: invalid UTF-8 and control characters are
// replaced, and bytes that are not text are described, not repeated.
func Message(body []byte) string {
	var st metav1.Status
	if obj, _, err := decoder.Decode(body, nil, &st); err == nil {
		if st, ok := obj.(*metav1.Status); ok && st.Message != "" {
			return Printable(st.Message)
		}
	}
	var s struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &s) == nil && s.Message != "" {
		return Printable(s.Message) // a Status without kind, or another error object
	}
	if !utf8.Valid(body) || bytes.ContainsFunc(body, func(r rune) bool { return unicode.IsControl(r) && !unicode.IsSpace(r) }) {
		return fmt.Sprintf("a %d-byte body that is not text", len(body))
	}
	return Printable(string(body))
}

// Printable makes s fit for a log line, an event message or a quoted header
// text: at most MaxMessageBytes, valid UTF-8, control characters (newlines
// included) as spaces, no space at either end.
func Printable(s string) string {
	if len(s) > MaxMessageBytes {
		s = s[:MaxMessageBytes]
	}
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	return strings.TrimSpace(s)
}
