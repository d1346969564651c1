//! HTTP/2 frames (RFC 9113 §4, §6): the 9-byte header, the types and flags this
//! server reads and writes, SETTINGS parameters, and writers that append whole
//! frames to a connection's output buffer.

/// What a client sends first (RFC 9113 §3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

pub const HEADER_LEN: usize = 9;

// Frame types (§6).
pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const PRIORITY: u8 = 0x2;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PUSH_PROMISE: u8 = 0x5;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;

// Flags.
pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const PADDED: u8 = 0x8;
pub const PRIORITY_FLAG: u8 = 0x20;

// SETTINGS parameters (§6.5.2).
pub const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
pub const SETTINGS_ENABLE_PUSH: u16 = 0x2;
pub const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
pub const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;
pub const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;

// Error codes (§7).
pub const NO_ERROR: u32 = 0x0;
pub const PROTOCOL_ERROR: u32 = 0x1;
pub const INTERNAL_ERROR: u32 = 0x2;
pub const FLOW_CONTROL_ERROR: u32 = 0x3;
pub const STREAM_CLOSED: u32 = 0x5;
pub const FRAME_SIZE_ERROR: u32 = 0x6;
pub const REFUSED_STREAM: u32 = 0x7;
pub const CANCEL: u32 = 0x8;
pub const COMPRESSION_ERROR: u32 = 0x9;

/// The smallest (and default) SETTINGS_MAX_FRAME_SIZE; the largest allowed.
pub const MIN_MAX_FRAME_SIZE: u32 = 16_384;
pub const MAX_MAX_FRAME_SIZE: u32 = (1 << 24) - 1;
/// The default flow-control window of a stream and of the connection.
pub const DEFAULT_WINDOW: u32 = 65_535;
/// The largest a flow-control window may grow (§6.9.1).
pub const MAX_WINDOW: i64 = (1 << 31) - 1;

/// A frame's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    pub len: usize,
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
}

impl Head {
    /// Reads a header from the first 9 bytes of `b` (the caller checks there are 9).
    pub fn parse(b: &[u8]) -> Head {
        Head {
            len: (b[0] as usize) << 16 | (b[1] as usize) << 8 | b[2] as usize,
            kind: b[3],
            flags: b[4],
            // The reserved bit is ignored on receipt (§4.1).
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        }
    }

    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// Appends a frame header.
pub fn put_head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    debug_assert!(len <= MAX_MAX_FRAME_SIZE as usize);
    out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
}

/// Appends a whole frame.
pub fn put_frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    put_head(out, payload.len(), kind, flags, stream);
    out.extend_from_slice(payload);
}

pub fn put_settings(out: &mut Vec<u8>, settings: &[(u16, u32)]) {
    put_head(out, settings.len() * 6, SETTINGS, 0, 0);
    for (id, v) in settings {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&v.to_be_bytes());
    }
}

pub fn put_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    debug_assert!(increment > 0 && increment <= MAX_WINDOW as u32);
    put_frame(out, WINDOW_UPDATE, 0, stream, &increment.to_be_bytes());
}

pub fn put_rst_stream(out: &mut Vec<u8>, stream: u32, code: u32) {
    put_frame(out, RST_STREAM, 0, stream, &code.to_be_bytes());
}

pub fn put_goaway(out: &mut Vec<u8>, last_stream: u32, code: u32, debug: &[u8]) {
    put_head(out, 8 + debug.len(), GOAWAY, 0, 0);
    out.extend_from_slice(&(last_stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(debug);
}

/// Appends a header block as HEADERS (+ CONTINUATION frames when it is larger
/// than the peer's frame size).
pub fn put_headers(out: &mut Vec<u8>, stream: u32, block: &[u8], end_stream: bool, max_frame: usize) {
    let es = if end_stream { END_STREAM } else { 0 };
    let mut chunks = block.chunks(max_frame.max(1));
    let first = chunks.next().unwrap_or(&[]);
    let last = block.len() <= max_frame;
    put_frame(out, HEADERS, es | if last { END_HEADERS } else { 0 }, stream, first);
    let mut rest = chunks.peekable();
    while let Some(c) = rest.next() {
        put_frame(out, CONTINUATION, if rest.peek().is_none() { END_HEADERS } else { 0 }, stream, c);
    }
}

/// The payload of a DATA or HEADERS frame without its padding (and, for
/// HEADERS, the priority fields); None when the padding is longer than the frame
/// (a PROTOCOL_ERROR, §6.1).
pub fn unpad(head: &Head, payload: &[u8]) -> Option<(usize, usize)> {
    let mut start = 0;
    let mut end = payload.len();
    if head.has(PADDED) {
        let pad = *payload.first()? as usize;
        start = 1;
        end = end.checked_sub(pad)?;
    }
    if head.kind == HEADERS && head.has(PRIORITY_FLAG) {
        start += 5;
    }
    (start <= end).then_some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_ignores_the_reserved_bit() {
        let mut out = Vec::new();
        put_head(&mut out, 0x01_02_03, HEADERS, END_HEADERS | END_STREAM, 0x1234_5678);
        assert_eq!(out.len(), HEADER_LEN);
        let h = Head::parse(&out);
        assert_eq!(h, Head { len: 0x01_02_03, kind: HEADERS, flags: END_HEADERS | END_STREAM, stream: 0x1234_5678 });
        out[5] |= 0x80;
        assert_eq!(Head::parse(&out).stream, 0x1234_5678);
    }

    #[test]
    fn large_header_blocks_continue() {
        let block: Vec<u8> = (0..40u8).collect();
        let mut out = Vec::new();
        put_headers(&mut out, 3, &block, true, 16);
        let mut at = 0;
        let mut frames = Vec::new();
        while at < out.len() {
            let h = Head::parse(&out[at..]);
            frames.push((h.kind, h.flags, h.len));
            at += HEADER_LEN + h.len;
        }
        assert_eq!(frames, vec![(HEADERS, END_STREAM, 16), (CONTINUATION, 0, 16), (CONTINUATION, END_HEADERS, 8)]);
        let mut small = Vec::new();
        put_headers(&mut small, 3, &block[..5], false, 16);
        assert_eq!(Head::parse(&small).flags, END_HEADERS);
    }

    #[test]
    fn padding_and_priority_are_stripped() {
        let h = Head { len: 10, kind: HEADERS, flags: PADDED | PRIORITY_FLAG, stream: 1 };
        // pad length 2, 5 bytes of priority, 2 bytes of block, 2 of padding
        let p = [2, 0, 0, 0, 0, 9, b'a', b'b', 0, 0];
        assert_eq!(unpad(&h, &p), Some((6, 8)));
        let d = Head { len: 3, kind: DATA, flags: PADDED, stream: 1 };
        assert_eq!(unpad(&d, &[5, 1, 2]), None);
        assert_eq!(unpad(&Head { len: 2, kind: DATA, flags: 0, stream: 1 }, &[1, 2]), Some((0, 2)));
    }
}
