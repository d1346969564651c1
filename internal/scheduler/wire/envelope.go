package wire

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// Header describes the pod a frame carries. It is small and read only by shards; relays forward
// the whole frame as opaque bytes.
type Header struct {
	UID       string `json:"uid"`
	Namespace string `json:"ns"`
	Name      string `json:"name"`
	Attempt   int    `json:"attempt"`   // 0 for the first try, +1 per requeue
	Collector int    `json:"collector"` // index of the collector that gathers the proposals
	SentNanos int64  `json:"sent"`      // unix nanos when intake sent it (stage timing)
	// Placed: the latest placements of constrained pods, for the shards' global views
	// (shard/global_view.go, intake/groups.go); only on frames of constrained pods.
	Placed []Placement `json:"placed,omitempty"`
	// Batch: the pods of one equivalence class carried by this frame (shard/batch.go). UID is then
	// BatchKeyPrefix + the first member's UID, Attempt the first member's attempt, Name the
	// first member's name; the body holds every member's pod, each prefixed by its uvarint length.
	Batch []BatchMember `json:"batch,omitempty"`
}

// BatchMember is one pod of a batch frame (same namespace as the frame).
type BatchMember struct {
	UID     string `json:"u"`
	Name    string `json:"n"`
	Attempt int    `json:"a"`
}

// Key is the member's own attempt key (its bind result is reported under it).
func (m BatchMember) Key() AttemptKey { return AttemptKey{UID: m.UID, Attempt: m.Attempt} }

// BatchKeyPrefix marks the attempt key of a batch (never a pod UID: UIDs have no '/').
const BatchKeyPrefix = "batch/"

// EncodeBatchFrame builds a batch frame from the members' encoded pods (in h.Batch's order).
func EncodeBatchFrame(h Header, pods [][]byte) ([]byte, error) {
	if len(pods) != len(h.Batch) || len(pods) == 0 {
		return nil, fmt.Errorf("batch frame: %d pods for %d members", len(pods), len(h.Batch))
	}
	hb, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	n := 4 + len(hb)
	for _, p := range pods {
		n += binary.MaxVarintLen64 + len(p)
	}
	out := make([]byte, 4, n)
	binary.BigEndian.PutUint32(out, uint32(len(hb)))
	out = append(out, hb...)
	for _, p := range pods {
		out = binary.AppendUvarint(out, uint64(len(p)))
		out = append(out, p...)
	}
	return out, nil
}

// SplitBatch returns each member's encoded pod from a batch frame's body.
func SplitBatch(body []byte, members int) ([][]byte, error) {
	out := make([][]byte, 0, members)
	for len(body) > 0 {
		l, n := binary.Uvarint(body)
		if n <= 0 || uint64(len(body)-n) < l {
			return nil, errors.New("batch frame: bad member length")
		}
		out = append(out, body[n:n+int(l)])
		body = body[n+int(l):]
	}
	if len(out) != members {
		return nil, fmt.Errorf("batch frame: %d pods for %d members", len(out), members)
	}
	return out, nil
}

// Key identifies one scheduling attempt of one pod.
func (h Header) Key() AttemptKey { return AttemptKey{UID: h.UID, Attempt: h.Attempt} }

// AttemptKey identifies one scheduling attempt.
type AttemptKey struct {
	UID     string `json:"uid"`
	Attempt int    `json:"attempt"`
}

// EncodeFrame builds a frame: 4-byte big-endian header length, JSON header, then the pod in
// Kubernetes protobuf (the generated Marshal of corev1.Pod).
func EncodeFrame(h Header, pod *corev1.Pod) ([]byte, error) {
	hb, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	pb, err := pod.Marshal()
	if err != nil {
		return nil, err
	}
	return AppendFrame(hb, pb), nil
}

// AppendFrame joins an encoded header and encoded pod bytes (requeues reuse the pod bytes).
func AppendFrame(header, podBytes []byte) []byte {
	out := make([]byte, 4+len(header)+len(podBytes))
	binary.BigEndian.PutUint32(out, uint32(len(header)))
	copy(out[4:], header)
	copy(out[4+len(header):], podBytes)
	return out
}

// SplitFrame returns the header and the pod bytes of a frame without decoding the pod.
func SplitFrame(frame []byte) (Header, []byte, error) {
	var h Header
	if len(frame) < 4 {
		return h, nil, errors.New("frame too short")
	}
	n := int(binary.BigEndian.Uint32(frame))
	if 4+n > len(frame) {
		return h, nil, fmt.Errorf("frame header length %d beyond %d bytes", n, len(frame))
	}
	if err := json.Unmarshal(frame[4:4+n], &h); err != nil {
		return h, nil, err
	}
	return h, frame[4+n:], nil
}

// DecodePod decodes the pod bytes of a frame.
func DecodePod(b []byte) (*corev1.Pod, error) {
	p := &corev1.Pod{}
	return p, p.Unmarshal(b)
}
