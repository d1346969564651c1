//! Small state files kept whole (`auth.state`, `member.state`): an 8-byte
//! magic, a little-endian body of fixed-width integers and length-prefixed
//! byte strings, and a CRC-32C of everything before it. A change rewrites the
//! whole file atomically and durably (write `<name>.tmp`, fsync, rename over
//! `<name>`, fsync the directory) before it is answered; such changes are rare
//! and small, so one rewrite per change is the simplest faithful form of the
//! backend buckets etcd keeps them in.
use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

/// Appends a length-prefixed byte string (len:u32 | bytes).
pub fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// Appends the CRC-32C of `out` to it: the file's last four bytes.
pub fn seal(mut out: Vec<u8>) -> Vec<u8> {
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Replaces `dir/name` with `bytes`, durably.
pub fn replace(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, dir.join(name))?;
    File::open(dir)?.sync_all()
}

/// The body of a sealed file after its magic, checked; errors start with `name`.
pub struct Reader<'a> {
    b: &'a [u8],
    name: &'static str,
}

impl<'a> Reader<'a> {
    /// Checks the magic and the checksum of `file`; `what` names the kind of file in the error.
    pub fn open(file: &'a [u8], magic: &[u8; 8], name: &'static str, what: &str) -> Result<Self, String> {
        if file.len() < magic.len() + 4 || &file[..8] != magic {
            return Err(format!("{name}: not {what}"));
        }
        let (body, crc) = file.split_at(file.len() - 4);
        if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().unwrap()) {
            return Err(format!("{name}: checksum mismatch"));
        }
        Ok(Reader { b: &body[8..], name })
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.b.len() < n {
            return Err(format!("{}: truncated", self.name));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    pub fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    pub fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    pub fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    pub fn bytes(&mut self) -> Result<Vec<u8>, String> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    pub fn string(&mut self) -> Result<String, String> {
        String::from_utf8(self.bytes()?).map_err(|_| format!("{}: a name is not UTF-8", self.name))
    }
    /// Ends the read: nothing may follow the last field.
    pub fn finish(self) -> Result<(), String> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(format!("{}: trailing bytes", self.name))
        }
    }
}
