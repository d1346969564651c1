//! HPACK (RFC 7541) for the lean server: request header blocks are decoded by
//! loona-hpack into a reusable field list (no allocation per request once warm);
//! response blocks are written with literals that are never indexed, so the
//! peer's decoder table (and its SETTINGS_HEADER_TABLE_SIZE) never matters to us.
use std::borrow::Cow;

/// The header table size we let a client's encoder use (the default).
pub const TABLE_SIZE: usize = 4096;
/// The largest header list a request may carry (SETTINGS_MAX_HEADER_LIST_SIZE, RFC 9113
/// §6.5.2 counting): gRPC metadata is small; grpc-go's own default is 16 MiB.
pub const MAX_HEADER_LIST: usize = 1 << 20;

/// A connection's decoder.
pub struct Decoder {
    inner: loona_hpack::Decoder<'static>,
}

impl Default for Decoder {
    fn default() -> Self {
        let mut inner = loona_hpack::Decoder::new();
        inner.set_max_allowed_table_size(TABLE_SIZE);
        Decoder { inner }
    }
}

impl Decoder {
    /// Decodes one whole header block into `fields` (cleared first). An error is
    /// a COMPRESSION_ERROR for the connection: its table can no longer be trusted.
    pub fn decode(&mut self, block: &[u8], fields: &mut Fields) -> Result<(), String> {
        fields.clear();
        // The whole block is decoded even past the limit (the table must stay the
        // client's), but nothing more is kept: a small block of references to one
        // large table entry would otherwise decode to gigabytes.
        let mut over = false;
        self.inner
            .decode_with_cb(block, |n: Cow<[u8]>, v: Cow<[u8]>| {
                if !over && fields.list_size() + n.len() + v.len() + 32 <= MAX_HEADER_LIST {
                    fields.push(&n, &v);
                } else {
                    over = true;
                }
            })
            .map_err(|e| format!("{e:?}"))?;
        if over {
            return Err(format!("header list larger than {MAX_HEADER_LIST} bytes"));
        }
        Ok(())
    }
}

/// The fields of one header block, in order, in one buffer.
#[derive(Default)]
pub struct Fields {
    buf: Vec<u8>,
    spans: Vec<(u32, u32, u32)>,
}

impl Fields {
    pub fn clear(&mut self) {
        self.buf.clear();
        self.spans.clear();
    }

    fn push(&mut self, name: &[u8], value: &[u8]) {
        let start = self.buf.len() as u32;
        self.buf.extend_from_slice(name);
        self.buf.extend_from_slice(value);
        self.spans.push((start, name.len() as u32, value.len() as u32));
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.spans.iter().map(|&(s, n, v)| {
            let (s, n, v) = (s as usize, n as usize, v as usize);
            (&self.buf[s..s + n], &self.buf[s + n..s + n + v])
        })
    }

    /// The first value of a field.
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// The total size as SETTINGS_MAX_HEADER_LIST_SIZE counts it (§6.5.2: 32 per field).
    pub fn list_size(&self) -> usize {
        self.buf.len() + 32 * self.spans.len()
    }
}

/// `:status: 200` (static index 8) and `content-type: application/grpc`.
pub const GRPC_HEADERS: &[u8] = b"\x88\x0f\x10\x10application/grpc";
/// `grpc-status: 0`.
pub const GRPC_OK_TRAILERS: &[u8] = b"\x00\x0bgrpc-status\x010";

/// Appends an integer with an `n`-bit prefix, the prefix's other bits `flags` (§5.1).
pub fn put_int(out: &mut Vec<u8>, flags: u8, n: u32, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(flags | v as u8);
        return;
    }
    out.push(flags | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// Appends a literal field without indexing, with a new name, raw strings (§6.2.2).
pub fn put_literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0);
    put_int(out, 0, 7, name.len());
    out.extend_from_slice(name);
    put_int(out, 0, 7, value.len());
    out.extend_from_slice(value);
}

/// Appends `:status` for a response that is not gRPC's (bridged HTTP answers).
pub fn put_status(out: &mut Vec<u8>, status: u16) {
    if status == 200 {
        out.push(0x88);
        return;
    }
    // Literal without indexing, name = static index 8 (:status).
    put_int(out, 0, 4, 8);
    let s = status.to_string();
    put_int(out, 0, 7, s.len());
    out.extend_from_slice(s.as_bytes());
}

/// gRPC's percent-encoding of grpc-message: bytes outside 0x20–0x7e, and '%', as %XX.
pub fn percent_encode(msg: &str) -> Cow<'_, [u8]> {
    let plain = |b: u8| (0x20..=0x7e).contains(&b) && b != b'%';
    if msg.bytes().all(plain) {
        return Cow::Borrowed(msg.as_bytes());
    }
    let mut out = Vec::with_capacity(msg.len() + 8);
    for b in msg.bytes() {
        if plain(b) {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    Cow::Owned(out)
}

/// The trailers of a gRPC status: grpc-status, and grpc-message unless empty.
pub fn put_grpc_status(out: &mut Vec<u8>, code: i32, message: &str) {
    put_literal(out, b"grpc-status", code.to_string().as_bytes());
    if !message.is_empty() {
        put_literal(out, b"grpc-message", &percent_encode(message));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Our blocks decode, by an independent decoder, to what we meant.
    #[test]
    fn response_blocks_decode() {
        let mut d = Decoder::default();
        let mut f = Fields::default();
        let mut block = GRPC_HEADERS.to_vec();
        block.extend_from_slice(GRPC_OK_TRAILERS);
        put_grpc_status(&mut block, 8, "etcdserver: mvcc: database space exceeded");
        put_status(&mut block, 404);
        put_literal(&mut block, b"x-long", &[b'a'; 300]);
        d.decode(&block, &mut f).unwrap();
        let got: Vec<(Vec<u8>, Vec<u8>)> = f.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
        let want: Vec<(&[u8], &[u8])> = vec![
            (b":status", b"200"),
            (b"content-type", b"application/grpc"),
            (b"grpc-status", b"0"),
            (b"grpc-status", b"8"),
            (b"grpc-message", b"etcdserver: mvcc: database space exceeded"),
            (b":status", b"404"),
            (b"x-long", &[b'a'; 300]),
        ];
        assert_eq!(got, want.into_iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect::<Vec<_>>());
        assert_eq!(f.get(b"grpc-status"), Some(&b"0"[..]));
    }

    /// A block of references to one large table entry stops being kept at the limit.
    #[test]
    fn a_decompression_bomb_is_refused() {
        let mut d = Decoder::default();
        let mut f = Fields::default();
        let mut first = vec![0x40, 1, b'x'];
        put_int(&mut first, 0, 7, 3000);
        first.extend_from_slice(&[b'v'; 3000]);
        d.decode(&first, &mut f).unwrap();
        let bomb = vec![0x80 | 62; 1000];
        assert!(d.decode(&bomb, &mut f).unwrap_err().contains("header list larger"));
        assert!(f.list_size() <= MAX_HEADER_LIST);
    }

    #[test]
    fn integers_use_their_prefix() {
        let mut out = Vec::new();
        put_int(&mut out, 0, 5, 10);
        put_int(&mut out, 0, 5, 1337);
        // RFC 7541 C.1.1 and C.1.2.
        assert_eq!(out, vec![10, 31, 154, 10]);
    }

    #[test]
    fn messages_are_percent_encoded() {
        assert_eq!(&*percent_encode("plain text"), b"plain text");
        assert_eq!(&*percent_encode("50% \u{e9}\n"), b"50%25 %C3%A9%0A");
    }

    /// The decoder keeps its dynamic table across blocks (a client indexes :path once).
    #[test]
    fn dynamic_table_is_kept_across_blocks() {
        let mut d = Decoder::default();
        let mut f = Fields::default();
        // Literal with incremental indexing, new name: "x-a: 1"; then indexed 62.
        let first = [0x40, 3, b'x', b'-', b'a', 1, b'1'];
        d.decode(&first, &mut f).unwrap();
        d.decode(&[0x80 | 62], &mut f).unwrap();
        assert_eq!(f.get(b"x-a"), Some(&b"1"[..]));
        assert!(d.decode(&[0x80 | 70], &mut f).is_err());
    }
}
