//! A stored value: the bytes a client wrote (`Raw`), or those bytes as one zstd frame made
//! with a dictionary of the value's resource prefix (`Zstd`), which the background packer
//! (`mvcc/packer.rs`) puts in place of a raw value when that is smaller (docs/design.md §1,
//! "Packed values"). A packed value carries its dictionary, so every read decodes it the same
//! way: `to_vec`, `bytes` and `cow` return exactly the bytes written; `len` is their length.
use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use zstd::zstd_safe::{self, CCtx, CParameter, DCtx};

/// A prefix's compression dictionary, alive while any value (or the shard) refers to it.
pub struct Dict {
    /// Unique in this process; a checkpoint names a value's dictionary by it.
    pub id: u32,
    /// The dictionary as zstd reads it (written to checkpoints).
    pub content: Box<[u8]>,
    cdict: zstd::dict::EncoderDictionary<'static>,
    ddict: zstd::dict::DecoderDictionary<'static>,
}

static NEXT_DICT: AtomicU32 = AtomicU32::new(1);

/// The zstd level values are packed at (docs/design.md, "Packed values": measured).
pub const LEVEL: i32 = 3;

impl Dict {
    pub fn new(content: &[u8]) -> Arc<Dict> {
        Arc::new(Dict {
            id: NEXT_DICT.fetch_add(1, Ordering::Relaxed),
            content: content.into(),
            cdict: zstd::dict::EncoderDictionary::copy(content, LEVEL),
            ddict: zstd::dict::DecoderDictionary::copy(content),
        })
    }
}

impl std::fmt::Debug for Dict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Dict#{}({} B)", self.id, self.content.len())
    }
}

#[derive(Clone)]
pub enum Value {
    Raw(Bytes),
    /// A zstd frame (content size in its header, no checksum, no dictionary id) of the
    /// value, made with `dict`; exactly sized.
    Zstd { dict: Arc<Dict>, data: Bytes },
    /// The value of a version a newer one has replaced, in a spill file
    /// (`mvcc/spill.rs`): `len` bytes at `off` of `seg`, read back on every read.
    Spilled { seg: Arc<super::spill::Segment>, off: u64, len: u32 },
}

impl Default for Value {
    fn default() -> Self {
        Value::Raw(Bytes::new())
    }
}

impl From<Bytes> for Value {
    fn from(b: Bytes) -> Self {
        Value::Raw(b)
    }
}

impl From<Vec<u8>> for Value {
    fn from(b: Vec<u8>) -> Self {
        Value::Raw(b.into())
    }
}

impl From<&'static str> for Value {
    fn from(b: &'static str) -> Self {
        Value::Raw(Bytes::from_static(b.as_bytes()))
    }
}

thread_local! {
    static DCTX: RefCell<DCtx<'static>> = RefCell::new(DCtx::create());
}

/// The content size a frame made by `Packer::pack` declares.
fn frame_len(data: &[u8]) -> usize {
    match zstd_safe::get_frame_content_size(data) {
        Ok(Some(n)) => n as usize,
        _ => panic!("a packed value without its content size"),
    }
}

impl Value {
    /// The length of the bytes written (what quota accounting and the watch log count).
    pub fn len(&self) -> usize {
        match self {
            Value::Raw(b) => b.len(),
            Value::Zstd { data, .. } => frame_len(data),
            Value::Spilled { len, .. } => *len as usize,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes held in memory for this value.
    pub fn stored_len(&self) -> usize {
        match self {
            Value::Raw(b) | Value::Zstd { data: b, .. } => b.len(),
            Value::Spilled { .. } => 0,
        }
    }

    pub fn is_packed(&self) -> bool {
        matches!(self, Value::Zstd { .. })
    }

    pub fn is_spilled(&self) -> bool {
        matches!(self, Value::Spilled { .. })
    }

    /// The bytes written, in a new buffer of exactly their length.
    pub fn to_vec(&self) -> Vec<u8> {
        match self {
            Value::Raw(b) => b.to_vec(),
            Value::Zstd { dict, data } => {
                let mut out = Vec::with_capacity(frame_len(data));
                DCTX.with(|c| c.borrow_mut().decompress_using_ddict(&mut out, data, dict.ddict.as_ddict()))
                    .expect("a packed value decodes with its own dictionary");
                debug_assert_eq!(out.len(), out.capacity());
                out
            }
            Value::Spilled { seg, off, len } => {
                let mut out = Vec::with_capacity(*len as usize);
                seg.read_into(*off, *len as usize, &mut out);
                out
            }
        }
    }

    /// Appends the bytes written to `out` (a packed value is decoded in place,
    /// with no buffer of its own: the Range encoder writes answers this way).
    pub fn write_to(&self, out: &mut Vec<u8>) {
        match self {
            Value::Raw(b) => out.extend_from_slice(b),
            Value::Zstd { dict, data } => {
                let at = out.len();
                let n = frame_len(data);
                out.resize(at + n, 0);
                let got = DCTX
                    .with(|c| c.borrow_mut().decompress_using_ddict(&mut out[at..], data, dict.ddict.as_ddict()))
                    .expect("a packed value decodes with its own dictionary");
                assert_eq!(got, n, "a packed value decodes to its declared length");
            }
            Value::Spilled { seg, off, len } => seg.read_into(*off, *len as usize, out),
        }
    }

    /// The bytes written: the raw buffer itself (shared), or a decoded copy.
    pub fn bytes(&self) -> Bytes {
        match self {
            Value::Raw(b) => b.clone(),
            Value::Zstd { .. } | Value::Spilled { .. } => self.to_vec().into(),
        }
    }

    /// The bytes written, borrowed when raw.
    pub fn cow(&self) -> Cow<'_, [u8]> {
        match self {
            Value::Raw(b) => Cow::Borrowed(b),
            Value::Zstd { .. } | Value::Spilled { .. } => Cow::Owned(self.to_vec()),
        }
    }
}

impl PartialEq for Value {
    fn eq(&self, o: &Self) -> bool {
        match (self, o) {
            (Value::Raw(a), Value::Raw(b)) => a == b,
            _ => self.len() == o.len() && self.cow() == o.cow(),
        }
    }
}

impl Eq for Value {}

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Raw(b) => write!(f, "Raw({b:?})"),
            Value::Zstd { dict, data } => write!(f, "Zstd({dict:?}, {} B of {:?})", data.len(), Bytes::from(self.to_vec())),
            Value::Spilled { off, len, .. } => write!(f, "Spilled({len} B at {off} of {:?})", Bytes::from(self.to_vec())),
        }
    }
}

/// Compresses values with one dictionary (the packer's thread owns one).
pub struct Compressor {
    cctx: CCtx<'static>,
    buf: Vec<u8>,
}

impl Default for Compressor {
    fn default() -> Self {
        Self::new()
    }
}

impl Compressor {
    pub fn new() -> Self {
        let mut cctx = CCtx::create();
        // A frame names neither its dictionary (the value holds it) nor a checksum (the
        // checkpoint's CRC covers the file); it declares its content size (`Value::len`).
        let _ = cctx.set_parameter(CParameter::DictIdFlag(false));
        let _ = cctx.set_parameter(CParameter::ChecksumFlag(false));
        let _ = cctx.set_parameter(CParameter::ContentSizeFlag(true));
        Compressor { cctx, buf: Vec::new() }
    }

    /// The packed form of `raw` when it is at least `min_saving` bytes smaller, else None.
    pub fn pack(&mut self, dict: &Arc<Dict>, raw: &[u8], min_saving: usize) -> Option<Value> {
        self.compress(dict, raw).filter(|n| n + min_saving <= raw.len()).map(|n| Value::Zstd {
            dict: dict.clone(),
            data: Bytes::copy_from_slice(&self.buf[..n]),
        })
    }

    /// The compressed size of `raw` with `dict` (left in the buffer).
    pub fn compress(&mut self, dict: &Dict, raw: &[u8]) -> Option<usize> {
        self.buf.clear();
        self.buf.reserve(zstd_safe::compress_bound(raw.len()));
        self.cctx.ref_cdict(dict.cdict.as_cdict()).ok()?;
        let r = self.cctx.compress2(&mut self.buf, raw);
        // The context must not keep a reference to a dictionary that may be dropped.
        let _ = self.cctx.disable_dictionary();
        r.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn similar(i: usize) -> Vec<u8> {
        format!("{{\"kind\":\"Pod\",\"metadata\":{{\"name\":\"pod-{i}\",\"namespace\":\"default\",\"labels\":{{\"app\":\"web\",\"tier\":\"frontend\"}}}},\"spec\":{{\"containers\":[{{\"image\":\"registry.k8s.io/pause:3.9\",\"name\":\"c{i}\"}}]}}}}").repeat(4).into_bytes()
    }

    #[test]
    fn packed_values_read_back_exactly() {
        let samples: Vec<Vec<u8>> = (0..400).map(similar).collect();
        let dict = Dict::new(&zstd::dict::from_samples(&samples, 16 << 10).unwrap());
        let mut c = Compressor::new();
        for i in [0, 7, 1000, 99999] {
            let raw = similar(i);
            let v = c.pack(&dict, &raw, 16).expect("similar values compress");
            assert!(v.is_packed() && v.stored_len() * 4 < raw.len(), "{} of {}", v.stored_len(), raw.len());
            assert_eq!((v.len(), v.to_vec(), v.bytes().to_vec(), v.cow().to_vec()), (raw.len(), raw.clone(), raw.clone(), raw.clone()));
            assert_eq!(v, Value::from(raw.clone()));
            assert_ne!(v, Value::from(similar(i + 1)));
        }
        // Random bytes do not shrink: they stay raw.
        let mut x = 0x9e3779b97f4a7c15u64;
        let random: Vec<u8> = (0..512)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect();
        assert!(c.pack(&dict, &random, 16).is_none());
        assert!(c.pack(&dict, b"", 16).is_none());
    }

    /// A Bytes, a pointer and a tag: the third form (spilled) costs the tag, 8 bytes a
    /// version (a pointer's one niche tells only two forms apart without one).
    #[test]
    fn a_value_is_no_bigger_than_a_bytes_a_pointer_and_a_tag() {
        assert!(std::mem::size_of::<Value>() <= 48, "{}", std::mem::size_of::<Value>());
    }
}
