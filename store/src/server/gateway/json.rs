//! Protobuf's JSON mapping as etcd's gateway writes and reads it (grpc-gateway
//! v2's JSONPb over protojson, UseProtoNames, EmitUnpopulated false,
//! DiscardUnknown), between JSON and the protobuf wire format, driven by the
//! tables of `schema` (generated from etcd's .proto files).
//!
//! Written: fields in declaration order under their .proto names; 64-bit
//! integers as strings, 32-bit ones as numbers; bytes as standard base64;
//! enums by name (an unknown number as the number); a scalar at its zero value
//! and an empty repeated field left out, a message present written even when
//! empty (`{}`), a oneof member written whenever set (`"version":"0"`).
//! Read: either name (.proto or lowerCamelCase), 64-bit integers as strings or
//! numbers, bytes in standard or URL base64 with or without padding, enums by
//! name or number, `null` as unset; unknown fields are skipped.
use base64::Engine;
use serde_json::Value;

pub enum Ty {
    I64,
    U64,
    I32,
    U32,
    Bool,
    Str,
    Bytes,
    Enum(&'static Enum),
    Msg(&'static Msg),
}

pub struct Field {
    pub num: u32,
    pub name: &'static str,
    pub json: &'static str,
    pub ty: Ty,
    pub repeated: bool,
    pub oneof: Option<&'static str>,
}

pub struct Msg {
    pub name: &'static str,
    pub fields: &'static [Field],
}

pub struct Enum {
    pub name: &'static str,
    pub values: &'static [(i32, &'static str)],
}

/// One RPC of etcd's gateway: the gRPC method it calls, the paths it answers
/// POST on, its messages.
pub struct Rpc {
    pub grpc: &'static str,
    pub http: &'static [&'static str],
    pub req: &'static Msg,
    pub resp: &'static Msg,
    pub client_stream: bool,
    pub server_stream: bool,
}

// ---- protobuf → JSON ----

fn varint(b: &[u8], i: &mut usize) -> Result<u64, String> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*i).ok_or("truncated varint")?;
        *i += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Ok(v);
        }
    }
    Err("varint too long".into())
}

fn scalar_json(ty: &Ty, v: u64, out: &mut String) {
    match ty {
        Ty::I64 => out.push_str(&format!("\"{}\"", v as i64)),
        Ty::U64 => out.push_str(&format!("\"{v}\"")),
        Ty::I32 => out.push_str(&(v as i32).to_string()),
        Ty::U32 => out.push_str(&(v as u32).to_string()),
        Ty::Bool => out.push_str(if v != 0 { "true" } else { "false" }),
        Ty::Enum(e) => match e.values.iter().find(|(n, _)| *n == v as i32) {
            Some((_, name)) => {
                out.push('"');
                out.push_str(name);
                out.push('"');
            }
            None => out.push_str(&(v as i32).to_string()),
        },
        _ => unreachable!("not a varint type"),
    }
}

fn string_json(s: &str, out: &mut String) {
    out.push_str(&serde_json::to_string(s).expect("a string serialises"));
}

/// One field's values as read from the wire, JSON-encoded, and whether any was
/// not the zero value (what decides an implicit-presence scalar's output).
#[derive(Default)]
struct Seen {
    values: Vec<String>,
    nonzero: bool,
}

/// `bytes` (one protobuf message of type `msg`) as protojson writes it.
pub fn to_json(msg: &Msg, bytes: &[u8], out: &mut String) -> Result<(), String> {
    let mut seen: Vec<Seen> = msg.fields.iter().map(|_| Seen::default()).collect();
    let mut i = 0;
    while i < bytes.len() {
        let key = varint(bytes, &mut i)?;
        let (num, wt) = ((key >> 3) as u32, key & 7);
        let idx = msg.fields.iter().position(|f| f.num == num);
        match wt {
            0 => {
                let v = varint(bytes, &mut i)?;
                if let Some(k) = idx {
                    let f = &msg.fields[k];
                    if matches!(f.ty, Ty::Str | Ty::Bytes | Ty::Msg(_)) {
                        return Err(format!("{}.{}: wire type 0", msg.name, f.name));
                    }
                    let mut s = String::new();
                    scalar_json(&f.ty, v, &mut s);
                    push(&mut seen[k], f.repeated, s, v != 0);
                }
            }
            2 => {
                let n = varint(bytes, &mut i)? as usize;
                let end = i.checked_add(n).filter(|e| *e <= bytes.len()).ok_or("truncated field")?;
                let data = &bytes[i..end];
                i = end;
                let Some(k) = idx else { continue };
                let f = &msg.fields[k];
                match &f.ty {
                    Ty::Str => {
                        let s = std::str::from_utf8(data).map_err(|_| format!("{}.{}: invalid UTF-8", msg.name, f.name))?;
                        let mut o = String::new();
                        string_json(s, &mut o);
                        push(&mut seen[k], f.repeated, o, !s.is_empty());
                    }
                    Ty::Bytes => {
                        let o = format!("\"{}\"", base64::engine::general_purpose::STANDARD.encode(data));
                        push(&mut seen[k], f.repeated, o, !data.is_empty());
                    }
                    Ty::Msg(m) => {
                        let mut o = String::new();
                        to_json(m, data, &mut o)?;
                        push(&mut seen[k], f.repeated, o, true);
                    }
                    ty => {
                        // Packed repeated scalars.
                        let mut j = 0;
                        while j < data.len() {
                            let v = varint(data, &mut j)?;
                            let mut s = String::new();
                            scalar_json(ty, v, &mut s);
                            push(&mut seen[k], true, s, v != 0);
                        }
                    }
                }
            }
            1 => i += 8,
            5 => i += 4,
            _ => return Err(format!("{}: wire type {wt}", msg.name)),
        }
        if i > bytes.len() {
            return Err("truncated field".into());
        }
    }
    out.push('{');
    let mut first = true;
    for (f, s) in msg.fields.iter().zip(seen) {
        let emit = if f.repeated || f.oneof.is_some() {
            !s.values.is_empty()
        } else {
            matches!(f.ty, Ty::Msg(_)) && !s.values.is_empty() || s.nonzero
        };
        if !emit {
            continue;
        }
        if !first {
            out.push(',');
        }
        first = false;
        out.push('"');
        out.push_str(f.name);
        out.push_str("\":");
        if f.repeated {
            out.push('[');
            out.push_str(&s.values.join(","));
            out.push(']');
        } else {
            out.push_str(s.values.last().expect("emitted only when seen"));
        }
    }
    out.push('}');
    Ok(())
}

fn push(s: &mut Seen, repeated: bool, v: String, nonzero: bool) {
    if repeated {
        s.values.push(v);
    } else {
        // The last one wins (proto3), and decides the zero test.
        s.values = vec![v];
        s.nonzero = nonzero;
        return;
    }
    s.nonzero |= nonzero;
}

// ---- JSON → protobuf ----

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_key(out: &mut Vec<u8>, num: u32, wt: u64) {
    put_varint(out, (u64::from(num) << 3) | wt);
}

fn put_len(out: &mut Vec<u8>, num: u32, data: &[u8]) {
    put_key(out, num, 2);
    put_varint(out, data.len() as u64);
    out.extend_from_slice(data);
}

/// protojson's refusal of a value for a field.
fn invalid(kind: &str, f: &Field, v: &Value) -> String {
    format!("proto: invalid value for {kind} field {}: {v}", f.name)
}

/// A JSON number or numeric string as an integer within [min, max].
fn integer(v: &Value, min: i128, max: i128) -> Option<i128> {
    let n: i128 = match v {
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into()
            } else if let Some(u) = n.as_u64() {
                u.into()
            } else {
                let f = n.as_f64()?;
                if f.fract() != 0.0 || !f.is_finite() {
                    return None;
                }
                f as i128
            }
        }
        Value::String(s) => {
            let s = s.as_str();
            if s.trim() != s || s.is_empty() {
                return None;
            }
            match s.parse::<i128>() {
                Ok(i) => i,
                Err(_) => {
                    // protojson takes exponent and fraction forms when the value is integral.
                    let f: f64 = s.parse().ok()?;
                    if f.fract() != 0.0 || !f.is_finite() {
                        return None;
                    }
                    f as i128
                }
            }
        }
        _ => return None,
    };
    (min..=max).contains(&n).then_some(n)
}

fn bytes_value(s: &str) -> Option<Vec<u8>> {
    use base64::alphabet::{STANDARD, URL_SAFE};
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    // Go's decoding as protojson does it: URL alphabet when '-' or '_' appear,
    // padding optional, stray low bits of the last character ignored.
    let cfg = GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent).with_decode_allow_trailing_bits(true);
    let alphabet = if s.contains(['-', '_']) { &URL_SAFE } else { &STANDARD };
    GeneralPurpose::new(alphabet, cfg).decode(s).ok()
}

/// One value of field `f` (an element, for a repeated one), appended to `out`
/// (unpacked); `skip_zero`: leave a zero scalar out (proto3 implicit presence).
fn value_to_proto(f: &Field, v: &Value, skip_zero: bool, out: &mut Vec<u8>) -> Result<(), String> {
    let n = match (&f.ty, v) {
        (Ty::I64, _) => integer(v, i64::MIN.into(), i64::MAX.into()).ok_or_else(|| invalid("int64", f, v))? as i64 as u64,
        (Ty::U64, _) => integer(v, 0, u64::MAX.into()).ok_or_else(|| invalid("uint64", f, v))? as u64,
        (Ty::I32, _) => integer(v, i32::MIN.into(), i32::MAX.into()).ok_or_else(|| invalid("int32", f, v))? as i64 as u64,
        (Ty::U32, _) => integer(v, 0, u32::MAX.into()).ok_or_else(|| invalid("uint32", f, v))? as u64,
        (Ty::Bool, Value::Bool(b)) => u64::from(*b),
        (Ty::Bool, _) => return Err(invalid("bool", f, v)),
        (Ty::Enum(e), Value::String(s)) => match e.values.iter().find(|(_, name)| name == s) {
            Some((n, _)) => *n as i64 as u64,
            // DiscardUnknown: an enum name this version does not know is left unset.
            None => return Ok(()),
        },
        (Ty::Enum(_), _) => integer(v, i32::MIN.into(), i32::MAX.into()).ok_or_else(|| invalid("enum", f, v))? as i64 as u64,
        (Ty::Str, Value::String(s)) => {
            if !(skip_zero && s.is_empty()) {
                put_len(out, f.num, s.as_bytes());
            }
            return Ok(());
        }
        (Ty::Str, _) => return Err(invalid("string", f, v)),
        (Ty::Bytes, Value::String(s)) => {
            let b = bytes_value(s).ok_or_else(|| invalid("bytes", f, v))?;
            if !(skip_zero && b.is_empty()) {
                put_len(out, f.num, &b);
            }
            return Ok(());
        }
        (Ty::Bytes, _) => return Err(invalid("bytes", f, v)),
        (Ty::Msg(m), Value::Object(_)) => {
            let mut inner = Vec::new();
            from_json(m, v, &mut inner)?;
            put_len(out, f.num, &inner);
            return Ok(());
        }
        (Ty::Msg(m), _) => return Err(format!("proto: invalid value for message field {} ({}): {v}", f.name, m.name)),
    };
    if !(skip_zero && n == 0) {
        put_key(out, f.num, 0);
        put_varint(out, n);
    }
    Ok(())
}

/// The JSON object `v`, a message of type `msg`, as protobuf bytes appended to `out`.
pub fn from_json(msg: &Msg, v: &Value, out: &mut Vec<u8>) -> Result<(), String> {
    let Value::Object(obj) = v else {
        return Err(format!("proto: syntax error: unexpected token {v}"));
    };
    let mut oneofs: Vec<&str> = Vec::new();
    for (k, v) in obj {
        let Some(f) = msg.fields.iter().find(|f| f.name == k || f.json == k) else { continue };
        if v.is_null() {
            continue;
        }
        if let Some(o) = f.oneof {
            if oneofs.contains(&o) {
                return Err(format!("proto: error parsing {k:?}, oneof {}.{o} is already set", msg.name));
            }
            oneofs.push(o);
        }
        if f.repeated {
            let Value::Array(items) = v else {
                return Err(format!("proto: invalid value for repeated field {}: {v}", f.name));
            };
            for item in items {
                value_to_proto(f, item, false, out)?;
            }
        } else {
            value_to_proto(f, v, f.oneof.is_none(), out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::schema::*;
    use super::*;
    use etcd_client::proto::*;
    use prost::Message;

    fn json_of<M: Message>(m: &Msg, v: &M) -> String {
        let mut s = String::new();
        to_json(m, &v.encode_to_vec(), &mut s).unwrap();
        s
    }

    fn parse<M: Message + Default>(m: &Msg, j: &str) -> M {
        let mut b = Vec::new();
        from_json(m, &serde_json::from_str(j).unwrap(), &mut b).unwrap();
        M::decode(b.as_slice()).unwrap()
    }

    #[test]
    fn range_response_as_protojson() {
        let r = PbRangeResponse {
            header: Some(PbResponseHeader { cluster_id: u64::MAX, member_id: 2, revision: 7, raft_term: 0 }),
            kvs: vec![PbKeyValue { key: b"foo".to_vec(), create_revision: 2, mod_revision: 3, version: 1, value: b"bar".to_vec(), lease: 0 }],
            more: false,
            count: 1,
        };
        assert_eq!(
            json_of(&M_ETCDSERVERPB_RANGERESPONSE, &r),
            r#"{"header":{"cluster_id":"18446744073709551615","member_id":"2","revision":"7"},"kvs":[{"key":"Zm9v","create_revision":"2","mod_revision":"3","version":"1","value":"YmFy"}],"count":"1"}"#
        );
        // An empty message present is written; absent, it is not.
        assert_eq!(json_of(&M_ETCDSERVERPB_PUTRESPONSE, &PbPutResponse { header: Some(Default::default()), prev_kv: None }), r#"{"header":{}}"#);
    }

    #[test]
    fn txn_oneofs_and_enums() {
        let j = r#"{"compare":[{"result":"EQUAL","target":"VERSION","key":"Zm9v","version":0},{"target":3,"key":"YQ==","value":"","result":"NOT_EQUAL"}],
            "success":[{"request_put":{"key":"Zm9v","value":"YmFy","lease":"0"}},{"requestRange":{"key":"Zm9v","sortOrder":"DESCEND"}}],
            "failure":[{"request_delete_range":{}}], "unknown": 5}"#;
        let t: PbTxnRequest = parse(&M_ETCDSERVERPB_TXNREQUEST, j);
        assert_eq!(t.compare.len(), 2);
        assert_eq!(t.compare[0].target_union, Some(PbTargetUnion::Version(0)));
        assert_eq!(t.compare[1].target, 3);
        assert_eq!(t.compare[1].result, 3);
        assert_eq!(t.compare[1].target_union, Some(PbTargetUnion::Value(vec![])));
        let PbTxnOpRequest::RequestRange(r) = t.success[1].request.as_ref().unwrap() else { panic!() };
        assert_eq!(r.sort_order, 2);
        assert_eq!(t.failure[0].request, Some(PbTxnOpRequest::RequestDeleteRange(Default::default())));
        // Written back: the oneof members even at zero, the enums by name, EQUAL and VERSION (0) left out.
        let back = json_of(&M_ETCDSERVERPB_TXNREQUEST, &t);
        assert!(back.starts_with(r#"{"compare":[{"key":"Zm9v","version":"0"},{"result":"NOT_EQUAL","target":"VALUE","key":"YQ==","value":""}],"success":[{"request_put":{"key":"Zm9v","value":"YmFy"}},"#), "{back}");
        assert!(back.ends_with(r#""failure":[{"request_delete_range":{}}]}"#), "{back}");
    }

    #[test]
    fn input_forms_and_refusals() {
        let r: PbRangeRequest = parse(&M_ETCDSERVERPB_RANGEREQUEST, r#"{"key":"Zm9v_w","range_end":"AA","limit":"10","revision":3e0,"keys_only":true}"#);
        assert_eq!((r.key, r.range_end, r.limit, r.revision, r.keys_only), (vec![0x66, 0x6f, 0x6f, 0xff], vec![0], 10, 3, true));
        let bad = |j: &str| {
            let mut b = Vec::new();
            from_json(&M_ETCDSERVERPB_RANGEREQUEST, &serde_json::from_str(j).unwrap(), &mut b).unwrap_err()
        };
        assert_eq!(bad(r#"{"limit":"x"}"#), r#"proto: invalid value for int64 field limit: "x""#);
        assert_eq!(bad(r#"{"limit":1.5}"#), "proto: invalid value for int64 field limit: 1.5");
        assert_eq!(bad(r#"{"key":"!"}"#), r#"proto: invalid value for bytes field key: "!""#);
        let r: PbRangeRequest = parse(&M_ETCDSERVERPB_RANGEREQUEST, r#"{"sort_order":"UP","sort_target":"MOD"}"#);
        assert_eq!((r.sort_order, r.sort_target), (0, 3));
        assert_eq!(bad("[]"), "proto: syntax error: unexpected token []");
        let mut b = Vec::new();
        let e = from_json(&M_ETCDSERVERPB_COMPARE, &serde_json::json!({"version": 1, "value": "YQ=="}), &mut b).unwrap_err();
        assert!(e.contains("oneof etcdserverpb.Compare.target_union is already set"), "{e}");
    }
}
