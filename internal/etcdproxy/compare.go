package etcdproxy

import (
	"cmp"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// leaseMap translates lease IDs between the recording and the replay store, which picks its own.
type leaseMap struct {
	toReplay   map[int64]int64
	toRecorded map[int64]int64
}

func newLeaseMap() *leaseMap {
	return &leaseMap{toReplay: map[int64]int64{}, toRecorded: map[int64]int64{}}
}

func (m *leaseMap) add(recorded, replayed int64) {
	m.toReplay[recorded] = replayed
	m.toRecorded[replayed] = recorded
}

func (m *leaseMap) replay(id int64) int64 {
	if v, ok := m.toReplay[id]; ok {
		return v
	}
	return id
}

func (m *leaseMap) recorded(id int64) int64 {
	if v, ok := m.toRecorded[id]; ok {
		return v
	}
	return id
}

// rewriteRequest changes recorded lease IDs in a request to the replay store's.
func (m *leaseMap) rewriteRequest(req any) {
	switch r := req.(type) {
	case *pb.PutRequest:
		if r.Lease != 0 {
			r.Lease = m.replay(r.Lease)
		}
	case *pb.TxnRequest:
		for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
			for _, op := range ops {
				switch o := op.Request.(type) {
				case *pb.RequestOp_RequestPut:
					m.rewriteRequest(o.RequestPut)
				case *pb.RequestOp_RequestTxn:
					m.rewriteRequest(o.RequestTxn)
				}
			}
		}
		for _, c := range r.Compare {
			if l, ok := c.TargetUnion.(*pb.Compare_Lease); ok && l.Lease != 0 {
				l.Lease = m.replay(l.Lease)
			}
		}
	case *pb.LeaseRevokeRequest:
		r.ID = m.replay(r.ID)
	case *pb.LeaseTimeToLiveRequest:
		r.ID = m.replay(r.ID)
	case *pb.LeaseKeepAliveRequest:
		r.ID = m.replay(r.ID)
	}
}

// normalize clears what legitimately differs between two stores given the same requests in the
// same order: member and cluster ids, raft term and index, sizes, versions and hashes of
// Status/Hash, remaining TTLs; lease IDs of the replay (replayed=true) are translated back to the
// recorded ones. Revisions stay: they must match.
func normalize(msg any, leases *leaseMap, replayed bool) {
	lease := func(id int64) int64 {
		if replayed && id != 0 {
			return leases.recorded(id)
		}
		return id
	}
	kv := func(k *mvccpb.KeyValue) {
		if k != nil {
			k.Lease = lease(k.Lease)
		}
	}
	switch m := msg.(type) {
	case *pb.RangeResponse:
		header(m.Header)
		for _, k := range m.Kvs {
			kv(k)
		}
	case *pb.PutResponse:
		header(m.Header)
		kv(m.PrevKv)
	case *pb.DeleteRangeResponse:
		header(m.Header)
		for _, k := range m.PrevKvs {
			kv(k)
		}
	case *pb.TxnResponse:
		header(m.Header)
		for _, r := range m.Responses {
			switch o := r.Response.(type) {
			case *pb.ResponseOp_ResponseRange:
				normalize(o.ResponseRange, leases, replayed)
			case *pb.ResponseOp_ResponsePut:
				normalize(o.ResponsePut, leases, replayed)
			case *pb.ResponseOp_ResponseDeleteRange:
				normalize(o.ResponseDeleteRange, leases, replayed)
			case *pb.ResponseOp_ResponseTxn:
				normalize(o.ResponseTxn, leases, replayed)
			}
		}
	case *pb.CompactionResponse:
		header(m.Header)
	case *pb.LeaseGrantResponse:
		header(m.Header)
		m.ID = lease(m.ID)
	case *pb.LeaseRevokeResponse:
		header(m.Header)
	case *pb.LeaseTimeToLiveResponse:
		header(m.Header)
		m.ID = lease(m.ID)
		m.TTL = 0
	case *pb.LeaseLeasesResponse:
		header(m.Header)
		for _, l := range m.Leases {
			l.ID = lease(l.ID)
		}
		slices.SortFunc(m.Leases, func(a, b *pb.LeaseStatus) int { return cmp.Compare(a.ID, b.ID) })
	case *pb.LeaseKeepAliveResponse:
		header(m.Header)
		m.ID = lease(m.ID)
		m.TTL = 0
	case *pb.WatchResponse:
		header(m.Header)
		m.WatchId = 0
		for _, e := range m.Events {
			kv(e.Kv)
			kv(e.PrevKv)
		}
	case *pb.StatusResponse:
		*m = pb.StatusResponse{Header: m.Header}
		header(m.Header)
	case *pb.HashResponse:
		*m = pb.HashResponse{Header: m.Header}
		header(m.Header)
	case *pb.HashKVResponse:
		*m = pb.HashKVResponse{Header: m.Header, CompactRevision: m.CompactRevision}
		header(m.Header)
	case *pb.AlarmResponse:
		header(m.Header)
		for _, a := range m.Alarms {
			a.MemberID = 0
		}
	case *pb.DefragmentResponse:
		header(m.Header)
	case *pb.MemberListResponse:
		m.Header = nil // a cluster call: etcd leaves the revision out, others fill it in
		for i, mem := range m.Members {
			m.Members[i] = &pb.Member{IsLearner: mem.IsLearner}
		}
	}
}

func header(h *pb.ResponseHeader) {
	if h != nil {
		*h = pb.ResponseHeader{Revision: h.Revision}
	}
}

// equal compares two messages of the same Go type field by field.
func equal(a, b protoadapt.MessageV1) bool {
	return proto.Equal(protoadapt.MessageV2Of(a), protoadapt.MessageV2Of(b))
}

// show renders a message for a mismatch report, cut to n bytes.
func show(m protoadapt.MessageV1, n int) string {
	if m == nil {
		return "<none>"
	}
	b, err := protojson.Marshal(protoadapt.MessageV2Of(m))
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// newMessage returns empty request and response messages for a unary method (nil if the method
// is not replayed as a unary call).
func newMessage(method string) (req, resp protoadapt.MessageV1) {
	switch method {
	case MethodRange:
		return &pb.RangeRequest{}, &pb.RangeResponse{}
	case MethodPut:
		return &pb.PutRequest{}, &pb.PutResponse{}
	case MethodDeleteRange:
		return &pb.DeleteRangeRequest{}, &pb.DeleteRangeResponse{}
	case MethodTxn:
		return &pb.TxnRequest{}, &pb.TxnResponse{}
	case MethodCompact:
		return &pb.CompactionRequest{}, &pb.CompactionResponse{}
	case MethodLeaseGrant:
		return &pb.LeaseGrantRequest{}, &pb.LeaseGrantResponse{}
	case MethodLeaseRevoke:
		return &pb.LeaseRevokeRequest{}, &pb.LeaseRevokeResponse{}
	case MethodLeaseTimeToLive:
		return &pb.LeaseTimeToLiveRequest{}, &pb.LeaseTimeToLiveResponse{}
	case MethodLeaseLeases:
		return &pb.LeaseLeasesRequest{}, &pb.LeaseLeasesResponse{}
	case MethodAlarm:
		return &pb.AlarmRequest{}, &pb.AlarmResponse{}
	case MethodStatus:
		return &pb.StatusRequest{}, &pb.StatusResponse{}
	case MethodDefragment:
		return &pb.DefragmentRequest{}, &pb.DefragmentResponse{}
	case MethodHash:
		return &pb.HashRequest{}, &pb.HashResponse{}
	case MethodHashKV:
		return &pb.HashKVRequest{}, &pb.HashKVResponse{}
	case MethodMemberList:
		return &pb.MemberListRequest{}, &pb.MemberListResponse{}
	}
	return nil, nil
}

// writesRevision reports whether a successful write response created a new revision.
func writesRevision(resp any) bool {
	switch r := resp.(type) {
	case *pb.PutResponse:
		return true
	case *pb.DeleteRangeResponse:
		return r.Deleted > 0
	case *pb.TxnResponse:
		for _, op := range r.Responses {
			switch o := op.Response.(type) {
			case *pb.ResponseOp_ResponsePut:
				return true
			case *pb.ResponseOp_ResponseDeleteRange:
				if o.ResponseDeleteRange.Deleted > 0 {
					return true
				}
			case *pb.ResponseOp_ResponseTxn:
				if writesRevision(o.ResponseTxn) {
					return true
				}
			}
		}
	}
	return false
}

// headerRevision of a response (0 if it has none).
func headerRevision(resp any) int64 {
	if h, ok := resp.(interface{ GetHeader() *pb.ResponseHeader }); ok && h.GetHeader() != nil {
		return h.GetHeader().Revision
	}
	return 0
}

// modRev of an event (0 without a key-value).
func modRev(e *mvccpb.Event) int64 {
	if e == nil || e.Kv == nil {
		return 0
	}
	return e.Kv.ModRevision
}
